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

# The core specs, which gem:install_check runs against an installed gem:
# the breaker's own, the gem's Ruby files', the store contract and the
# signatures (spec/integration and the adapters need a stack of their own).
GEM_CORE_SPECS = %w[spec/breaker spec/circuit_breaker spec/store_contract spec/sig].freeze

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

# The Debian packages of a platform gem's check on `ruby` (a NATIVE_RUBIES
# entry): that Ruby, and what GEM_SMOKE and the core specs need.
def gem_check_packages(ruby)
  "#{ruby[:packages]} rake rake-compiler ruby-rspec ruby-rack ruby-rack-test ruby-activesupport redis-server ruby-redis"
end

namespace :gem do
  # bin/test ci runs this beside its first leg: the chroots of the gem
  # checks built and given their packages (mostly waiting on the network).
  task :chroots do
    roots = NATIVE_PLATFORMS.values.flat_map do |info|
      NATIVE_RUBIES.values.map { |ruby| [ruby[:suite], info[:arch], gem_check_packages(ruby)] }
    end
    roots.group_by { |suite, arch, _| [suite, arch] }.each do |(suite, arch), entries|
      chroot_ready(suite, arch, entries.map(&:last).join(" ").split.uniq.join(" "))
    end
  end

  desc "Install both gems into empty GEM_HOMEs: the platform gem without Rust, the source gem offline"
  task check: %w[gem:check_native gem:check_source]

  desc "Install each platform gem, on each Ruby it carries, in a Debian chroot of its architecture without Rust"
  task check_native: "native:gem" do
    NATIVE_PLATFORMS.each do |platform, info|
      NATIVE_RUBIES.each do |abi, ruby|
        gem = "pkg/#{GEMSPEC.name}-#{GEMSPEC.version}-#{platform}.gem"
        # The core specs under qemu take minutes each: aarch64's newest Ruby
        # gets the install and GEM_SMOKE only (docs/development.md).
        specs = !(info[:arch] == "arm64" && abi == NATIVE_RUBIES.keys.last)
        puts "#{gem}: Ruby #{abi} (Debian #{ruby[:suite]} #{info[:arch]}, #{ruby[:ruby]}, no cargo)" \
             "#{', install and smoke test only' unless specs}"
        sh "bin/chroot", "--packages", gem_check_packages(ruby), ruby[:suite], info[:arch],
           "bin/with-ruby", ruby[:ruby], "rake", "gem:install_check[#{gem},#{specs}]", verbose: false
      end
    end
  end

  # Inside bin/chroot (no Rust toolchain there): installs `gem`, runs
  # GEM_SMOKE, then (unless specs is false) the core specs against the
  # installed gem.
  task :install_check, [:gem, :specs] do |_, args|
    abort "gem:install_check runs inside bin/chroot (it replaces lib/)" unless ENV["CIRCUIT_BREAKER_CHROOT"]
    abort "cargo is reachable: the install would not show that it needs none" if system("command -v cargo >/dev/null")
    dir = "/tmp/circuit_breaker-gem"
    check_gem(args.fetch(:gem), dir, {})
    next if args[:specs] == "false"

    # The core specs with the installed gem as lib/: bin/chroot's overlay
    # takes the change, the checkout keeps its lib/.
    installed = Dir.glob("#{dir}/gems/gems/#{GEMSPEC.name}-*/lib").first
    rm_rf "lib", verbose: false
    ln_s installed, "lib", verbose: false
    sh "rspec", *GEM_CORE_SPECS
  end

  desc "Install the source gem where a tool is missing (no cargo; cargo but no libclang): it must say so and leave nothing"
  task check_missing: "gem" do
    source = "pkg/#{GEMSPEC.name}-#{GEMSPEC.version}.gem"
    # Debian 12's root of the platform gem's checks: Ruby and its headers,
    # no cargo, no libclang (gem:check_native installs neither there).
    { "no cargo" => [[], "cargo"], "cargo, no libclang" => [["--cargo"], "libclang"] }.each do |what, (flags, tool)|
      puts "#{source}: #{what} (Debian bookworm amd64)"
      sh "bin/chroot", *flags, "--packages", "ruby ruby-dev rake", "bookworm", "amd64",
         "rake", "gem:missing_check[#{source},#{tool}]", verbose: false
    end
  end

  # Inside bin/chroot: installs the source gem where `tool` is missing; the
  # install must fail naming it, with how to install it, before compiling,
  # and leave nothing of the gem in GEM_HOME but RubyGems' own log.
  task :missing_check, [:gem, :tool] do |_, args|
    abort "gem:missing_check runs inside bin/chroot" unless ENV["CIRCUIT_BREAKER_CHROOT"]
    home = "/tmp/circuit_breaker-missing"
    env = { "GEM_HOME" => home, "GEM_PATH" => home, "RUBYOPT" => nil, "RUBYLIB" => nil, "BUNDLE_GEMFILE" => nil,
            "CARGO_NET_OFFLINE" => "true" }
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    out = IO.popen(env, [RbConfig.ruby, "-rrubygems/gem_runner", "-e", "Gem::GemRunner.new.run(ARGV)", "--",
                         "install", "--local", "--no-document", args.fetch(:gem)], err: %i[child out], &:read)
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    abort "#{out}\nthe install succeeded without #{args[:tool]}" if $?.success?
    expected = { "cargo" => [/- cargo \(Rust [\d.]+ or newer\) is not on PATH/, /apt-get install cargo/, /brew install rust/],
                 "libclang" => [/- libclang .* was not found/, /apt-get install libclang-dev/, /apk add clang-dev/] }
    missing = expected.fetch(args[:tool]).reject { |re| out.match?(re) }
    abort "#{out}\nthe message lacks #{missing.map(&:source)}" unless missing.empty?
    abort "#{out}\nit compiled before failing" if out.include?("Compiling")
    abort "#{out}\nit did not name the precompiled gems" unless out.include?("A precompiled gem, which needs none of this")
    left = Dir.glob("#{home}/**/*", File::FNM_DOTMATCH).select { |f| File.file?(f) }
    left -= Dir.glob("#{home}/extensions/**/gem_make.out") + Dir.glob("#{home}/cache/*.gem")
    abort "#{out}\nthe failed install left #{left.size} files behind: #{left.first(5)}" unless left.empty?
    kept = Dir.glob("#{home}/**/*").select { |f| File.file?(f) }.sum { |f| File.size(f) }
    puts out.lines.grep(/^circuit_breaker:|^  - /).map { |l| "  #{l}" }.join
    puts format("  failed in %.1f s; left in GEM_HOME: %d bytes (RubyGems' gem_make.out and its cached .gem)", took, kept)
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
