# frozen_string_literal: true

require "tmpdir"

# The gem patches nothing global, and the source articles' top-level
# SlidingWindow and CircuitOpenError come only with
# `require "circuit_breaker/articles"`, never replacing the app's own
# (lib/circuit_breaker/articles.rb). Each case runs in a fresh Ruby, since
# top-level names are process-wide.
RSpec.describe "top-level names" do
  # Real path: Ruby reports where files were loaded from so (lib/ may be a
  # symlink, as in rake gem:install_check).
  lib = File.realpath(File.expand_path("../../lib", __dir__))
  run = lambda do |code, *flags|
    out, err, status = ChildProcess.capture3(RbConfig.ruby, *flags, "-I", lib, "-e", code)
    raise "ruby failed:\n#{err}\n#{out}" unless status.success?

    [out.strip, err]
  end

  it "are none with require \"circuit_breaker\": Object gains only CircuitBreaker, nothing is prepended or included" do
    out, err = run.call(<<~RUBY)
      before = Object.constants
      ancestors = [Module, Object, Kernel, Class, BasicObject].to_h { |m| [m, m.ancestors] }
      require "circuit_breaker"
      require "circuit_breaker/test_helpers"
      changed = ancestors.reject { |m, list| m.ancestors == list }.keys
      gem_methods = [Module, Object, Kernel, Class, BasicObject].flat_map do |m|
        (m.instance_methods(false) + m.private_instance_methods(false)).filter_map do |name|
          file = m.instance_method(name).source_location&.first
          "\#{m}#\#{name}" if file&.start_with?(#{lib.inspect})
        end
      end
      # Constants the gem's files define (the standard libraries it loads add theirs).
      added = (Object.constants - before).select { |c| Object.const_source_location(c)&.first&.start_with?(#{lib.inspect}) }
      p [added, changed, gem_methods,
         defined?(SlidingWindow), defined?(CircuitOpenError)]
    RUBY

    expect(out).to eq("[[:CircuitBreaker], [], [], nil, nil]")
    expect(err).to be_empty
  end

  it "leave an app's NameError raised from the app's frame, with its receiver and error_highlight's caret" do
    # From a file, as an app's code runs: error_highlight reads the line it
    # marks from the source, which Ruby 3.4 keeps for no `-e` script.
    script = File.join(Dir.mktmpdir("circuit_breaker-articles"), "app.rb")
    File.write(script, <<~RUBY)
      require "circuit_breaker"
      module App; def self.client = Faraday; end
      begin
        App.client
      rescue NameError => e
        # Ruby 3.2 moved error_highlight's caret from message to detailed_message.
        full = e.respond_to?(:detailed_message) ? e.detailed_message(highlight: false) : e.message
        p [e.message.lines.first.chomp, full.lines.last.strip, e.name, e.receiver, e.backtrace_locations.first.path, e.backtrace_locations.first.lineno]
      end
    RUBY
    out, = run.call("load #{script.dump}")

    expect(out).to eq(%(["uninitialized constant App::Faraday", "^^^^^^^", :Faraday, App, #{script.dump}, 2]))
  ensure
    FileUtils.rm_rf(File.dirname(script)) if script
  end

  it "with require \"circuit_breaker/articles\", are the gem's classes, at top level and inside the app's classes" do
    out, err = run.call(<<~RUBY)
      require "circuit_breaker/articles"
      module App; class Client; def self.window = SlidingWindow.new(size: 5); end; end
      breaker = CircuitBreaker.new(window: SlidingWindow.new(size: 100)).trip!
      rescued = begin
        breaker.call { 1 }
      rescue CircuitOpenError => e
        e.class
      end
      p [SlidingWindow.equal?(CircuitBreaker::SlidingWindow), CircuitOpenError.equal?(CircuitBreaker::OpenError),
         App::Client.window.class, rescued, Module.ancestors.include?(CircuitBreaker)]
    RUBY

    expect(out).to eq("[true, true, CircuitBreaker::SlidingWindow, CircuitBreaker::OpenError, false]")
    expect(err).to be_empty
  end

  it "skip, with a warning, a name the app defined before, and leave the app's class as it was" do
    out, err = run.call(<<~RUBY)
      class ApplicationModel; end
      class SlidingWindow < ApplicationModel; def self.mine = true; end
      require "circuit_breaker/articles"
      p [SlidingWindow.superclass, SlidingWindow.respond_to?(:mine), CircuitBreaker::SlidingWindow.respond_to?(:mine),
         CircuitOpenError.equal?(CircuitBreaker::OpenError)]
    RUBY

    expect(out).to eq("[ApplicationModel, true, false, true]")
    expect(err).to eq("circuit_breaker/articles: SlidingWindow is already defined by the app and stays the app's; " \
                      "write CircuitBreaker::SlidingWindow for the gem's\n")
  end

  it "skip, with a warning, a name the app will autoload (as Zeitwerk registers app/models), which then loads the app's" do
    Dir.mktmpdir do |dir|
      file = File.join(dir, "circuit_open_error.rb")
      File.write(file, "class CircuitOpenError < RuntimeError; end\n")
      out, err = run.call(<<~RUBY)
        autoload :CircuitOpenError, #{file.inspect}
        require "circuit_breaker/articles"
        p [CircuitOpenError.superclass, SlidingWindow.equal?(CircuitBreaker::SlidingWindow)]
      RUBY

      expect(out).to eq("[RuntimeError, true]")
      expect(err).to eq("circuit_breaker/articles: CircuitOpenError is left to the app's autoload (#{file}); " \
                        "write CircuitBreaker::OpenError for the gem's\n")
    end
  end

  it "say nothing when required twice or after the gem" do
    out, err = run.call(<<~RUBY)
      require "circuit_breaker"
      require "circuit_breaker/articles"
      load #{File.join(lib, 'circuit_breaker/articles.rb').inspect}
      p SlidingWindow.equal?(CircuitBreaker::SlidingWindow)
    RUBY

    expect([out, err]).to eq(["true", ""])
  end

  it "are a deprecated no-op with require \"circuit_breaker/namespaced\", which loads the gem and warns under -W:deprecated" do
    quiet, quiet_err = run.call('require "circuit_breaker/namespaced"; p [defined?(CircuitBreaker), defined?(SlidingWindow)]')
    _, loud_err = run.call('require "circuit_breaker/namespaced"', "-W:deprecated")

    expect([quiet, quiet_err]).to eq(['["constant", nil]', ""])
    expect(loud_err).to include("circuit_breaker/namespaced is deprecated", 'require "circuit_breaker/articles"')
  end
end
