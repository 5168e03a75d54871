# frozen_string_literal: true

# The two gems (docs/install.md):
#   rake gem         pkg/circuit_breaker-VERSION.gem, the source: its crates
#                    travel in vendor/crates, and it compiles at install time
#                    without crates.io.
#   rake native:gem  pkg/circuit_breaker-VERSION-x86_64-linux.gem: the
#                    compiled library for this Ruby's ABI; installs without
#                    Rust, libclang or network.
require "rubygems/package"

directory "pkg"

# Builds `spec` into pkg/ and returns the gem's path.
def build_gem(spec)
  file = Gem::Package.build(spec)
  mv file, "pkg/#{file}"
  "pkg/#{file}"
end

desc "Build pkg/circuit_breaker-#{GEMSPEC.version}.gem, the source gem with its crates vendored"
task gem: "pkg" do
  rm_rf "vendor/crates"
  # cargo prints the source-replacement settings; extconf.rb passes them itself.
  sh "cargo vendor --locked --versioned-dirs vendor/crates > /dev/null"
  spec = GEMSPEC.dup
  # With their dot files: cargo checks each crate against its .cargo-checksum.json.
  spec.files += Dir.glob("vendor/crates/**/*", File::FNM_DOTMATCH).select { |f| File.file?(f) }
  build_gem(spec)
end

# The newest glibc symbol version `library` asks for must be the floor
# docs/install.md states.
def check_glibc_floor(library)
  floor = `objdump -T #{library}`.scan(/GLIBC_([\d.]+)/).flatten.max_by { |v| Gem::Version.new(v) }
  documented = File.read(File.expand_path("../docs/install.md", __dir__))[/glibc floor is ([\d.]+)/, 1]
  return if floor == documented

  abort "#{library} needs glibc #{floor}; docs/install.md says #{documented.inspect}: update it"
end

namespace :native do
  desc "Build pkg/circuit_breaker-#{GEMSPEC.version}-#{Gem::Platform.local}.gem with the compiled library"
  task gem: "pkg" do
    # The shipped build: release profile (stripped), Linux code paths.
    ENV["CIRCUIT_BREAKER_PROFILE"] = "release"
    ENV.delete("CIRCUIT_BREAKER_PORTABLE")
    Rake::Task["compile"].invoke
    library = "lib/circuit_breaker/circuit_breaker.#{RbConfig::CONFIG['DLEXT']}"
    check_glibc_floor(library)

    spec = GEMSPEC.dup
    spec.platform = Gem::Platform.local
    spec.extensions = []
    spec.files = spec.files.grep_v(%r{\A(ext|vendor)/|\ACargo\.}) + [library]
    # A C extension loads only into the Ruby ABI it was compiled against:
    # 3.1.x for a library built by Ruby 3.1.
    minor = RUBY_VERSION[/\A\d+\.\d+/]
    spec.required_ruby_version = [">= #{minor}", "< #{minor.succ}.dev"]
    build_gem(spec)
  end
end

# What a user's program does with an installed gem: bin/test runs it with
# only the gem's GEM_HOME visible.
GEM_SMOKE = <<~'RUBY'
  require "circuit_breaker"
  home = ENV.fetch("GEM_HOME")
  library = $LOADED_FEATURES.grep(/circuit_breaker\.so\z/).first.to_s
  abort "loaded #{library.inspect}, not the library in #{home}" unless library.start_with?(home)
  copies = Dir.glob("#{home}/**/circuit_breaker.so")
  abort "library installed #{copies.size} times: #{copies}" unless copies == [library]
  breaker = CircuitBreaker.new(min_calls: 2, clock: CircuitBreaker::ManualClock.new)
  2.times { breaker.call { raise "down" } rescue RuntimeError }
  begin
    breaker.call { abort "an open breaker ran the block" }
  rescue CircuitBreaker::OpenError => e
    puts "  #{library.delete_prefix(home)} (#{File.size(library)} bytes, the only copy): #{e.message}"
  end
RUBY

# Installs `gem` into an empty GEM_HOME in `dir` with `env` added to the
# environment, then runs GEM_SMOKE there.
def check_gem(gem, dir, env)
  home = File.join(dir, "gems")
  env = { "GEM_HOME" => home, "GEM_PATH" => home, "RUBYOPT" => nil, "RUBYLIB" => nil, "BUNDLE_GEMFILE" => nil }.merge(env)
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  # `gem install`, found without PATH.
  sh env, RbConfig.ruby, "-rrubygems/gem_runner", "-e", "Gem::GemRunner.new.run(ARGV)", "--",
     "install", "--local", "--no-document", gem, verbose: false
  puts format("  installed in %.1f s", Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
  sh env, RbConfig.ruby, "-e", GEM_SMOKE, verbose: false
end

namespace :gem do
  desc "Install both gems into empty GEM_HOMEs: the platform gem without Rust, the source gem offline"
  task check: %w[native:gem gem] do
    require "tmpdir"
    Dir.mktmpdir("circuit_breaker-gems") do |tmp|
      native = "pkg/#{GEMSPEC.name}-#{GEMSPEC.version}-#{Gem::Platform.local}.gem"
      # PATH without a directory that holds cargo or rustc.
      path = ENV.fetch("PATH").split(File::PATH_SEPARATOR)
                .reject { |d| %w[cargo rustc].any? { |t| File.executable?(File.join(d, t)) } }
      puts "#{native}: PATH without cargo: #{path.join(File::PATH_SEPARATOR)}"
      check_gem(native, File.join(tmp, "native"), "PATH" => path.join(File::PATH_SEPARATOR))

      source = "pkg/#{GEMSPEC.name}-#{GEMSPEC.version}.gem"
      cargo_home = File.join(tmp, "cargo-home")
      mkdir_p cargo_home
      puts "#{source}: offline, CARGO_HOME=#{cargo_home} (empty)"
      check_gem(source, File.join(tmp, "source"), "CARGO_HOME" => cargo_home, "CARGO_NET_OFFLINE" => "true")
    end
  end
end
