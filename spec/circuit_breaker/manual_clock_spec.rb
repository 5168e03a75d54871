# frozen_string_literal: true

RSpec.describe CircuitBreaker::ManualClock do
  it "starts at 0.0 or at the given time" do
    expect(described_class.new.now).to eq(0.0)
    expect(described_class.new(12.5).now).to eq(12.5)
  end

  it "moves only when advanced, and advance returns the clock" do
    clock = described_class.new
    expect(clock.advance(1.5)).to be(clock)
    expect(clock.now).to eq(1.5)
    3.times { clock.advance(0.1) }
    expect(clock.now).to eq(1.8)
  end

  it "accepts Integer and Rational seconds" do
    expect(described_class.new(2).advance(Rational(1, 4)).now).to eq(2.25)
  end

  it "refuses negative, non-finite and non-numeric steps, naming the argument" do
    clock = described_class.new
    expect { clock.advance(-1) }.to raise_error(ArgumentError, /seconds must be a finite Numeric >= 0/)
    expect { clock.advance(Float::NAN) }.to raise_error(ArgumentError, /seconds/)
    expect { clock.advance(Float::INFINITY) }.to raise_error(ArgumentError, /seconds/)
    expect { clock.advance("1") }.to raise_error(TypeError, /seconds must be a Numeric \(got String\)/)
    expect { clock.advance(nil) }.to raise_error(TypeError, /seconds .*got nil/)
    expect { described_class.new(Float::NAN) }.to raise_error(ArgumentError, /start/)
    expect(clock.now).to eq(0.0)
  end
end
