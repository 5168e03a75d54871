# frozen_string_literal: true

# The two gems (docs/install.md):
#   rake gem         pkg/circuit_breaker-VERSION.gem, the source: its crates
#                    travel in vendor/crates, and it compiles at install time
#                    without crates.io.
#   rake native:gem  the platform gems (rakelib/native.rake).
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

# What a user's program does with an installed gem: bin/test runs it with
# only the gem's GEM_HOME visible.
GEM_SMOKE = <<~'RUBY'
  require "circuit_breaker"
  home = ENV.fetch("GEM_HOME")
  library = $LOADED_FEATURES.grep(/circuit_breaker\.so\z/).first.to_s
  abort "loaded #{library.inspect}, not the library in #{home}" unless library.start_with?(home)
  # One copy per Ruby ABI a platform gem carries (lib/circuit_breaker/3.3/),
  # one in all for the source gem (lib/circuit_breaker/).
  copies = Dir.glob("#{home}/**/circuit_breaker.so").group_by { |c| File.basename(File.dirname(c)) }
  abort "library installed more than once: #{copies}" unless copies.values.all?(&:one?)
  abi = RUBY_VERSION[/\A\d+\.\d+/]
  if copies.key?(abi) && File.dirname(library) != File.dirname(copies[abi].first)
    abort "Ruby #{abi} loaded #{library}, not #{copies[abi].first}"
  end
  breaker = CircuitBreaker.new(min_calls: 2, clock: CircuitBreaker::ManualClock.new)
  2.times { breaker.call { raise "down" } rescue RuntimeError }
  begin
    breaker.call { abort "an open breaker ran the block" }
  rescue CircuitBreaker::OpenError => e
    puts "  Ruby #{RUBY_VERSION} on #{RUBY_PLATFORM}: #{library.delete_prefix(home)} " \
         "(#{File.size(library)} bytes; copies: #{copies.keys.sort.join(', ')}): #{e.message}"
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
  task check: %w[gem:check_native gem:check_source]

  desc "Install each platform gem, on each Ruby it carries, in a Debian chroot of its architecture without Rust"
  task check_native: "native:gem" do
    NATIVE_PLATFORMS.each do |platform, info|
      NATIVE_RUBIES.each do |abi, suite|
        gem = "pkg/#{GEMSPEC.name}-#{GEMSPEC.version}-#{platform}.gem"
        puts "#{gem}: Ruby #{abi} (Debian #{suite} #{info[:arch]}, no cargo)"
        packages = "ruby rake rake-compiler ruby-rspec ruby-rack ruby-rack-test ruby-activesupport redis-server ruby-redis"
        sh "bin/chroot", "--packages", packages, suite, info[:arch],
           "rake", "gem:install_check[#{gem}]", verbose: false
      end
    end
  end

  # Inside bin/chroot (no Rust toolchain there): installs `gem`, runs
  # GEM_SMOKE, then the core specs against the installed gem.
  task :install_check, [:gem] do |_, args|
    abort "gem:install_check runs inside bin/chroot (it replaces lib/)" unless ENV["CIRCUIT_BREAKER_CHROOT"]
    abort "cargo is reachable: the install would not show that it needs none" if system("command -v cargo >/dev/null")
    dir = "/tmp/circuit_breaker-gem"
    check_gem(args.fetch(:gem), dir, {})
    # The core specs with the installed gem as lib/: bin/chroot's overlay
    # takes the change, the checkout keeps its lib/.
    installed = Dir.glob("#{dir}/gems/gems/#{GEMSPEC.name}-*/lib").first
    rm_rf "lib", verbose: false
    ln_s installed, "lib", verbose: false
    sh "rspec", "spec/circuit_breaker"
  end

  desc "Install the source gem into an empty GEM_HOME offline, with an empty CARGO_HOME"
  task check_source: "gem" do
    require "tmpdir"
    Dir.mktmpdir("circuit_breaker-gems") do |tmp|
      source = "pkg/#{GEMSPEC.name}-#{GEMSPEC.version}.gem"
      cargo_home = File.join(tmp, "cargo-home")
      mkdir_p cargo_home
      puts "#{source}: offline, CARGO_HOME=#{cargo_home} (empty)"
      # Its own target directory, as a user's install has (a CI leg's cached one is not).
      check_gem(source, File.join(tmp, "source"), "CARGO_HOME" => cargo_home, "CARGO_NET_OFFLINE" => "true",
                                                  "CARGO_TARGET_DIR" => nil)
    end
  end
end
