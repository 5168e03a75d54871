# frozen_string_literal: true

# The adaptive cap's settings (docs/configuration.md, docs/choices.md "The
# adaptive concurrency cap"): their ranges, and that they come only with
# max_concurrent: :adaptive.
RSpec.describe "CircuitBreaker adaptive cap options" do
  it "refuses adaptive settings without max_concurrent: :adaptive, naming each" do
    [[:adaptive_initial, 5], [:adaptive_min, 2], [:adaptive_max, 50], [:adaptive_smoothing, 0.5]].each do |key, value|
      [nil, 4].each do |cap|
        expect { CircuitBreaker.new(max_concurrent: cap, key => value) }.to raise_error(
          ArgumentError, "#{key} must be given only with max_concurrent: :adaptive (got #{value})"
        )
      end
    end
  end

  it "refuses settings out of their ranges, naming the option and the range" do
    {
      { adaptive_min: 0 } => "adaptive_min must be an Integer in 1..100_000 (got 0)",
      { adaptive_min: 10, adaptive_max: 5 } => "adaptive_max must be an Integer in adaptive_min..100_000 (got 5)",
      { adaptive_max: 100_001 } => "adaptive_max must be an Integer in adaptive_min..100_000 (got 100001)",
      { adaptive_initial: 30, adaptive_max: 20 } =>
        "adaptive_initial must be an Integer in adaptive_min..adaptive_max (got 30)",
      { adaptive_smoothing: 0 } => "adaptive_smoothing must be a Float in (0.0, 1.0] (got 0)",
      { adaptive_smoothing: 1.5 } => "adaptive_smoothing must be a Float in (0.0, 1.0] (got 1.5)"
    }.each do |given, message|
      expect { CircuitBreaker.new(max_concurrent: :adaptive, **given) }.to raise_error(ArgumentError, message)
    end
  end

  it "refuses settings of the wrong type with a TypeError naming the option" do
    expect { CircuitBreaker.new(max_concurrent: :adaptive, adaptive_min: "2") }
      .to raise_error(TypeError, /\Aadaptive_min must be/)
    expect { CircuitBreaker.new(max_concurrent: :adaptive, adaptive_max: 2.5) }
      .to raise_error(TypeError, /\Aadaptive_max must be/)
    expect { CircuitBreaker.new(max_concurrent: :adaptive, adaptive_smoothing: "0.5") }
      .to raise_error(TypeError, /\Aadaptive_smoothing must be/)
  end
end
