# frozen_string_literal: true

require "rbconfig"
require "circuit_breaker/registry"
require "circuit_breaker/prometheus"
require "circuit_breaker/dashboard"
require "circuit_breaker/test_helpers"

# sig/**/*.rbs against the loaded gem. The signatures are read with a small
# line-based reader (declarations one per line, as sig/ writes them), so the
# check needs no rbs gem; `rbs validate` runs too when the rbs gem is there.
#
# Tagged :integration: reflection and a subprocess only, nothing for a
# GC.stress run to find.
RSpec.describe "sig/ (RBS signatures)", :integration do
  root = File.expand_path("../..", __dir__)
  sig_files = Dir[File.join(root, "sig", "**", "*.rbs")].sort

  # Reads one .rbs file: the class/module paths declared, and for each the
  # instance methods, singleton methods and constants declared.
  read_rbs = lambda do |path|
    decls = Hash.new { |h, k| h[k] = { instance: [], singleton: [], constants: [] } }
    stack = [] # [kind, name]: :ns for class/module, :skip for interfaces
    File.foreach(path) do |raw|
      line = raw.sub(/#.*/, "").rstrip
      namespace = stack.select { |kind, _| kind == :ns }.map(&:last).join("::")
      in_interface = stack.any? { |kind, _| kind == :skip }
      case line
      when /\A\s*(?:class|module)\s+([A-Z][\w:]*)/
        stack << [:ns, Regexp.last_match(1)]
        decls[stack.select { |kind, _| kind == :ns }.map(&:last).join("::")]
      when /\A\s*interface\s+_\w+/ then stack << [:skip, nil]
      when /\A\s*end\s*\z/ then stack.pop
      when /\A\s*def\s+self\.([^\s:]+)\s*:/
        decls[namespace][:singleton] << Regexp.last_match(1).to_sym unless in_interface
      when /\A\s*def\s+([^\s:]+)\s*:/
        decls[namespace][:instance] << Regexp.last_match(1).to_sym unless in_interface
      when /\A\s*attr_(reader|writer|accessor)\s+(\w+)\s*:/
        kind, attr = Regexp.last_match.captures
        decls[namespace][:instance] << attr.to_sym unless kind == "writer"
        decls[namespace][:instance] << :"#{attr}=" unless kind == "reader"
      when /\A\s*([A-Z]\w*)\s*:\s*\S/
        decls[namespace][:constants] << Regexp.last_match(1).to_sym
      end
    end
    raise "#{path}: unbalanced class/module/interface and end" unless stack.empty?

    decls
  end

  faraday = File.join(root, "lib", "circuit_breaker", "faraday.rb")
  faraday_present = File.exist?(faraday)
  # Whether CircuitBreaker::Faraday could be loaded (on first use).
  faraday_state = nil
  faraday_loaded = lambda do
    if faraday_state.nil?
      faraday_state = begin
        require faraday
        true
      rescue LoadError
        false
      end
    end
    faraday_state
  end

  it "finds the signature files" do
    expect(sig_files.map { |f| f.delete_prefix("#{root}/") }).to include("sig/circuit_breaker.rbs")
  end

  sig_files.each do |file|
    relative = file.delete_prefix("#{root}/")

    describe relative do
      before do
        if relative.include?("faraday") && !(faraday_present && faraday_loaded.call)
          skip "lib/circuit_breaker/faraday.rb is absent or Faraday is not installed"
        end
        require "circuit_breaker/articles" if relative == "sig/circuit_breaker/articles.rbs"
        adapter = relative[%r{\Asig/(circuit_breaker/adapters(?:/\w+)?)\.rbs\z}, 1]
        if adapter
          begin
            require adapter # the adapter's library (bin/test installs it)
          rescue LoadError => e
            packages = { "sidekiq" => %w[ruby-sidekiq ruby-json], "grpc" => %w[ruby-grpc], "redis" => %w[ruby-redis],
                         "active_record" => %w[ruby-activerecord] }.fetch(File.basename(adapter), [])
            skip "#{adapter}: #{DebianPackages.load_error_reason(e, *packages)}"
          end
        end
      end

      read_rbs.call(file).each do |path, declared|
        owner = path.empty? ? "top level" : path

        it "declares #{owner} as a class or module the gem defines, with its constants" do
          mod = path.empty? ? Object : Object.const_get(path)
          expect(mod).to be_a(Module)
          missing = declared[:constants].reject { |c| mod.const_defined?(c, false) }
          expect(missing).to be_empty, "#{owner} lacks the constants #{missing.inspect} its RBS declares"
        end

        next if path.empty?

        it "declares only methods #{owner} has" do
          mod = Object.const_get(path)
          missing = declared[:instance].reject do |m|
            m == :initialize ? mod.private_method_defined?(m) : mod.public_method_defined?(m)
          end
          missing += declared[:singleton].reject { |m| mod.respond_to?(m) }.map { |m| :"self.#{m}" }
          expect(missing).to be_empty, "#{owner} lacks #{missing.inspect}, declared in #{relative}"
        end
      end
    end
  end

  describe "completeness" do
    declared = Hash.new { |h, k| h[k] = { instance: [], singleton: [] } }
    sig_files.each do |file|
      read_rbs.call(file).each do |path, d|
        declared[path][:instance].concat(d[:instance])
        declared[path][:singleton].concat(d[:singleton])
      end
    end

    classes = %w[CircuitBreaker CircuitBreaker::SlidingWindow CircuitBreaker::TimeWindow CircuitBreaker::ManualClock
                 CircuitBreaker::Error CircuitBreaker::OpenError CircuitBreaker::StateChange
                 CircuitBreaker::Prometheus CircuitBreaker::Dashboard]
    classes << "CircuitBreaker::Faraday" if faraday_present

    classes.each do |path|
      it "declares every public method the gem gives #{path}" do
        skip "Faraday is not installed" if path.end_with?("Faraday") && !faraday_loaded.call
        mod = Object.const_get(path)
        base = mod.is_a?(Class) ? mod.superclass : Module.new
        own = mod.public_instance_methods - base.public_instance_methods
        own_singleton = mod.singleton_methods - base.singleton_methods
        # Struct.new's class methods ([], members, keyword_init?...) come with every Struct class.
        own_singleton -= Struct.new(:member).singleton_methods if mod < Struct
        undeclared = (own - declared[path][:instance]) + (own_singleton - declared[path][:singleton]).map { |m| :"self.#{m}" }
        expect(undeclared).to be_empty, "#{path} has #{undeclared.sort.inspect}, not declared in sig/"
      end
    end
  end

  rbs_gem = Gem::Specification.find_all_by_name("rbs").max_by(&:version)

  it "passes rbs validate" do
    skip "the rbs gem is not installed (gem install rbs, then: rbs -I sig validate)" unless rbs_gem

    out, status = ChildProcess.capture2e(RbConfig.ruby, rbs_gem.bin_file("rbs"), "-I", "sig", "validate", chdir: root)
    expect(status).to be_success, out.lines.grep_v(/\AValidating /).join
  end
end
