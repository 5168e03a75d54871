# frozen_string_literal: true

require "open3"
require "tmpdir"

# The source articles' top-level SlidingWindow and CircuitOpenError: they
# work where the app has no such names, and never clobber, reopen or shadow
# the app's own (lib/circuit_breaker/top_level.rb). Each case runs in a
# fresh Ruby, since the names are process-wide.
RSpec.describe "top-level SlidingWindow and CircuitOpenError" do
  lib = File.expand_path("../../lib", __dir__)
  run = lambda do |code|
    out, status = Open3.capture2e(RbConfig.ruby, "-I", lib, "-e", code)
    raise "ruby failed:\n#{out}" unless status.success?

    out.strip
  end

  it "are the gem's classes where the app has none, at top level and inside the app's classes" do
    out = run.call(<<~RUBY)
      require "circuit_breaker"
      module App; class Client; def self.window = SlidingWindow.new(size: 5); end; end
      p [SlidingWindow.equal?(CircuitBreaker::SlidingWindow), CircuitOpenError.equal?(CircuitBreaker::OpenError),
         App::Client.window.class, Object.const_get(:CircuitOpenError)]
    RUBY

    expect(out).to eq("[true, true, CircuitBreaker::SlidingWindow, CircuitBreaker::OpenError]")
  end

  it "become plain constants once asked for, so a rescue on the rejection path looks up nothing more" do
    out = run.call(<<~RUBY)
      require "circuit_breaker"
      before = Object.const_defined?(:CircuitOpenError, false)
      breaker = CircuitBreaker.new.trip!
      misses = 0
      TracePoint.new(:raise) { |tp| misses += 1 if tp.raised_exception.is_a?(NameError) }.enable do
        3.times do
          breaker.call { 1 }
        rescue CircuitOpenError
          nil
        end
      end
      p [before, Object.const_defined?(:CircuitOpenError, false), misses]
    RUBY

    expect(out).to eq("[false, true, 1]")
  end

  it "leave an app's class defined after the gem alone: no superclass mismatch, the gem's class not reopened" do
    out = run.call(<<~RUBY)
      require "circuit_breaker"
      class ApplicationModel; end
      class SlidingWindow < ApplicationModel; def self.mine = true; end
      class CircuitOpenError < RuntimeError; end
      p [SlidingWindow.superclass, CircuitBreaker::SlidingWindow.respond_to?(:mine), CircuitOpenError.superclass,
         CircuitBreaker::OpenError.superclass]
    RUBY

    expect(out).to eq("[ApplicationModel, false, RuntimeError, CircuitBreaker::Error]")
  end

  it "leave an app's class defined before the gem alone" do
    out = run.call(<<~RUBY)
      class SlidingWindow; def self.mine = true; end
      require "circuit_breaker"
      p [SlidingWindow.respond_to?(:mine), SlidingWindow.equal?(CircuitBreaker::SlidingWindow)]
    RUBY

    expect(out).to eq("[true, false]")
  end

  it "defer to an autoload the app registered (as Rails' autoloaders do)" do
    Dir.mktmpdir do |dir|
      File.write(File.join(dir, "sliding_window.rb"), "class SlidingWindow; def self.mine = true; end\n")
      out = run.call(<<~RUBY)
        require "circuit_breaker"
        autoload :SlidingWindow, #{File.join(dir, 'sliding_window.rb').inspect}
        p SlidingWindow.respond_to?(:mine)
      RUBY

      expect(out).to eq("true")
    end
  end

  it "are not defined at all with require \"circuit_breaker/namespaced\", whatever loads the gem too" do
    out = run.call(<<~RUBY)
      require "circuit_breaker/namespaced"
      require "circuit_breaker"
      names = %i[SlidingWindow CircuitOpenError].map do |name|
        Object.const_get(name)
      rescue NameError => e
        e.class
      end
      p names + [CircuitBreaker::SlidingWindow.new(size: 2).size]
    RUBY

    expect(out).to eq("[NameError, NameError, 2]")
  end
end
