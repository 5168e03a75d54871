# frozen_string_literal: true

require "rbconfig"

# The one way a spec is skipped for a Debian package (docs/development.md,
# "Skipped examples"): the package is installed, but cannot serve the Ruby
# running the suite, for a reason named here. Two such reasons exist:
#
# - Its C extension was built for another Ruby only. Debian builds a
#   release's packages for that release's Ruby; experimental's Ruby 3.4 on
#   a forky root (built for 3.3) has no ruby-pg, ruby-nokogiri, ... of its
#   own. Read from the package's files: which Ruby ABIs its .so files are
#   under.
# - A named incompatibility between two of Debian's own packages (KNOWN),
#   which the spec that meets it names.
#
# Anything else stays a failure under bin/test (a LoadError of a package
# bin/test installs means the install is broken); a bare `rspec` on a
# machine without the test packages skips with what is missing.
module DebianPackages
  # Named incompatibilities: name => a check that returns why it is there
  # (naming the packages and their versions), or nil when it is not. A spec
  # meeting one asks for it by name (skip_for).
  KNOWN = {
    "ActiveSupport's parallel testing on minitest 6" => lambda {
      activesupport = DebianPackages.version("ruby-activesupport")
      minitest = DebianPackages.version("ruby-minitest")
      next unless activesupport&.match?(/\A(\d+:)?7\.2\./) && minitest && minitest[/\A[\d.]+/].to_i >= 6

      "ruby-activesupport #{activesupport} with ruby-minitest #{minitest}: ActiveSupport 7.2's parallel " \
        "workers call Minitest.run_one_method, which minitest 6 removed"
    }
  }.freeze

  module_function

  # dpkg-query's output, "" where there is no dpkg (a bounded child:
  # spec/support/child_process.rb).
  def dpkg_query(*args)
    return "" unless ChildProcess.installed?("dpkg-query")

    out, = ChildProcess.capture2("dpkg-query", *args, err: File::NULL, within: 60)
    out
  end

  # The installed version of a Debian package, or nil.
  def version(package)
    @versions ||= {}
    return @versions[package] if @versions.key?(package)

    @versions[package] = dpkg_query("-W", "-f", "${Status} ${Version}", package)[/\Ainstall ok installed (\S+)/, 1]
  end

  # The Ruby ABIs ("3.3.0") an installed package's C extension was built for;
  # [] for a package without one, or not installed.
  def extension_abis(package)
    dpkg_query("-L", package).lines.map(&:chomp).grep(/\.so\z/).filter_map { |f| f[%r{/(\d+\.\d+\.\d+)/}, 1] }.uniq.sort
  end

  # Why `package` cannot serve this Ruby, or nil when nothing known stops it.
  def unusable(package)
    abis = extension_abis(package)
    this = RbConfig::CONFIG["ruby_version"]
    if !abis.empty? && !abis.include?(this)
      return "#{package} #{version(package)}: Debian built its C extension for Ruby #{abis.join(', ')} only, " \
             "not for this Ruby (#{this})"
    end

    nil
  end

  # Skips the running example (or group) when one of `packages` cannot
  # serve this Ruby, naming it and why.
  # A package after the first is one the first needs ("ruby-sidekiq needs
  # ruby-json: ...").
  def skip_unless_usable(example, *packages)
    packages.each do |package|
      reason = unusable(package)
      example.skip(package == packages.first ? reason : "#{packages.first} needs #{package}: #{reason}") if reason
    end
  end

  # Skips the running example when the named incompatibility (KNOWN) is
  # there.
  def skip_for(example, name)
    reason = KNOWN.fetch(name).call
    example.skip(reason) if reason
  end

  # For a LoadError met loading what `packages` provide: the reason to skip
  # with. Under bin/test, a LoadError no package explains is raised again.
  def load_error_reason(error, *packages)
    packages.each do |package|
      reason = unusable(package)
      return "#{reason} (#{error.message})" if reason
    end
    raise error if ENV["CIRCUIT_BREAKER_SKIP_COUNT"]

    "#{error.message} (bin/test installs #{packages.join(', ')})"
  end
end

RSpec.configure do |config|
  # bin/test adds each run's skipped examples to its leg's count.
  config.after(:suite) do
    if (file = ENV.fetch("CIRCUIT_BREAKER_SKIP_COUNT", nil))
      File.write(file, "#{RSpec.configuration.reporter.pending_examples.size}\n", mode: "a")
    end
  end
end
