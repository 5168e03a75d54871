# frozen_string_literal: true

# lib/circuit_breaker/native.rb documents, for rdoc and ri, the methods the
# Rust extension defines: every one of them must have its entry there.
RSpec.describe "lib/circuit_breaker/native.rb (docs of native methods)" do
  path = File.expand_path("../../lib/circuit_breaker/native.rb", __dir__)

  # "Class#method" / "Class.method" for each `:method:` / `:singleton-method:`
  # directive, in the class the directive sits in.
  documented = lambda do
    stack = []
    File.foreach(path).with_object([]) do |line, names|
      case line
      when /\A\s*class (\w+)/ then stack << Regexp.last_match(1)
      when /\A\s*end\s*\z/ then stack.pop
      when /\A\s*# :(method|singleton-method): (\S+)/
        names << "#{stack.join('::')}#{Regexp.last_match(1) == 'method' ? '#' : '.'}#{Regexp.last_match(2)}"
      end
    end
  end

  native = lambda do |klass|
    instance = klass.public_instance_methods(false).select { |m| klass.instance_method(m).source_location.nil? }
    singleton = klass.singleton_class.public_instance_methods(false)
                     .select { |m| klass.method(m).source_location.nil? }
    instance.map { |m| "#{klass.name}##{m}" } + singleton.map { |m| "#{klass.name}.#{m}" }
  end

  it "has an entry for every public method the extension defines" do
    classes = [CircuitBreaker, CircuitBreaker::SlidingWindow, CircuitBreaker::TimeWindow, CircuitBreaker::ManualClock]
    missing = classes.flat_map { |k| native.call(k) } - documented.call

    expect(missing).to be_empty, "document these in #{path}: #{missing.join(', ')}"
  end

  it "documents only methods that exist" do
    ghosts = documented.call.reject do |name|
      klass, sep, meth = name.partition(/[#.]/)
      owner = Object.const_get(klass)
      sep == "#" ? owner.method_defined?(meth) : owner.respond_to?(meth)
    end

    expect(ghosts).to be_empty
  end
end
