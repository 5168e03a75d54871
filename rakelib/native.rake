# frozen_string_literal: true

# The platform gems (docs/install.md):
#   rake native:gem  pkg/circuit_breaker-VERSION-x86_64-linux.gem and
#                    pkg/circuit_breaker-VERSION-aarch64-linux.gem, each with
#                    one library per Ruby ABI in lib/circuit_breaker/ABI/
#                    (lib/circuit_breaker.rb loads the one for RUBY_VERSION);
#                    they install without Rust, libclang or network.
#
# Every library is compiled and linked here, on Debian 12: against its C
# library, and for aarch64 with its cross toolchain (gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross), so that each needs glibc 2.34 at most whichever
# Ruby it is for. Only a Ruby's headers and build configuration come from the
# Debian chroot that has that Ruby (bin/chroot; for arm64 its Ruby runs under
# qemu-user, which is how rb-sys reads its RbConfig). This machine's own Ruby
# builds its own ABI. Needs root for the chroots.
require_relative "../ext/circuit_breaker/precompiled"

# RubyGems platform => Debian architecture and Rust target.
NATIVE_PLATFORMS = {
  "x86_64-linux" => { arch: "amd64", target: "x86_64-unknown-linux-gnu", gcc: "x86_64-linux-gnu-gcc" },
  "aarch64-linux" => { arch: "arm64", target: "aarch64-unknown-linux-gnu", gcc: "aarch64-linux-gnu-gcc" }
}.freeze
# Ruby ABI => the Debian root that has that Ruby, its command there, and the
# packages that bring it with its headers. One forky root serves 3.3 (its
# own Ruby) and 3.4 (experimental's ruby3.4, which needs a libc of forky or
# sid): one chroot less per architecture than a trixie root for 3.3, and
# the same Ruby 3.3.8.
NATIVE_RUBIES = {
  "3.1" => { suite: "bookworm", ruby: "/usr/bin/ruby", packages: "ruby ruby-dev" },
  "3.3" => { suite: "forky", ruby: "/usr/bin/ruby3.3", packages: "ruby3.3 ruby3.3-dev" },
  "3.4" => { suite: "forky", ruby: "/usr/bin/ruby3.4", packages: "ruby3.4/experimental ruby3.4-dev/experimental" }
}.freeze
unless NATIVE_RUBIES.keys == CircuitBreakerPrecompiled::RUBIES && NATIVE_PLATFORMS.keys == CircuitBreakerPrecompiled::PLATFORMS
  abort "rakelib/native.rake builds #{NATIVE_RUBIES.keys} on #{NATIVE_PLATFORMS.keys}; " \
        "ext/circuit_breaker/precompiled.rb says #{CircuitBreakerPrecompiled::RUBIES} on #{CircuitBreakerPrecompiled::PLATFORMS}"
end

def host_arch
  @host_arch ||= `dpkg --print-architecture`.strip
end

# A Debian chroot with `packages`, through bin/chroot; returns its directory.
def chroot_ready(suite, arch, packages)
  sh "bin/chroot", "--packages", packages, suite, arch, "true", verbose: false
  File.join(ENV.fetch("CIRCUIT_BREAKER_CACHE", "/var/cache/circuit_breaker"), "#{suite}-#{arch}")
end

# The environment that makes cargo build for the Ruby `abi` of `platform`.
def native_build_env(platform, abi)
  arch = NATIVE_PLATFORMS.fetch(platform)[:arch]
  # This machine's own Ruby, when it is that one.
  return { "RUBY" => RbConfig.ruby } if arch == host_arch && RUBY_VERSION.start_with?("#{abi}.")

  info = NATIVE_RUBIES.fetch(abi)
  root = chroot_ready(info[:suite], arch, info[:packages])
  mkdir_p "tmp/native"
  ruby = File.expand_path("tmp/native/ruby-#{abi}-#{arch}")
  # rb-sys runs $RUBY to read RbConfig; QEMU_CPU as in bin/chroot.
  File.write(ruby, "#!/bin/sh\nexec env QEMU_CPU=max,pauth=off chroot #{root} #{info[:ruby]} \"$@\"\n")
  chmod 0o755, ruby
  config = ->(key) { `#{ruby} -rrbconfig -e 'print RbConfig::CONFIG[#{key.dump}]'` }
  version = config.call("ruby_version")
  abort "#{root}: Ruby #{version}, not #{abi}" unless version.start_with?("#{abi}.")
  # The paths it prints are inside the chroot.
  { "RUBY" => ruby,
    "RBCONFIG_rubyhdrdir" => root + config.call("rubyhdrdir"),
    "RBCONFIG_rubyarchhdrdir" => root + config.call("rubyarchhdrdir") }.merge(stdckdint_env(platform))
end

# Ruby 3.4's headers, configured by forky's gcc, include C23's <stdckdint.h>
# (its config.h says HAVE_STDCKDINT_H), which Debian 12's clang 14 (rb-sys's
# bindgen) and gcc 12 do not have. This one defines the three macros as
# gcc's own does and as Ruby's headers do where the file is missing: with
# the compilers' overflow builtins.
def stdckdint_env(platform)
  dir = File.expand_path("tmp/native/include")
  mkdir_p dir, verbose: false
  File.write("#{dir}/stdckdint.h", <<~C)
    /* Written by rakelib/native.rake: C23's <stdckdint.h> for compilers older than C23. */
    #ifndef CIRCUIT_BREAKER_STDCKDINT_H
    #define CIRCUIT_BREAKER_STDCKDINT_H
    #define ckd_add(r, a, b) ((_Bool)__builtin_add_overflow((a), (b), (r)))
    #define ckd_sub(r, a, b) ((_Bool)__builtin_sub_overflow((a), (b), (r)))
    #define ckd_mul(r, a, b) ((_Bool)__builtin_mul_overflow((a), (b), (r)))
    #define __STDC_VERSION_STDCKDINT_H__ 202311L
    #endif
  C
  target = NATIVE_PLATFORMS.fetch(platform)[:target]
  { "BINDGEN_EXTRA_CLANG_ARGS_#{target}" => "-I#{dir}", "CFLAGS_#{target.tr('-', '_')}" => "-I#{dir}" }
end

# Builds the library for `platform` and Ruby `abi`; returns its path.
def native_library(platform, abi)
  info = NATIVE_PLATFORMS.fetch(platform)
  # The cross toolchain (Debian's) and Rust's standard library for the
  # target (rustup's), when missing.
  sh "bin/setup", info[:gcc].delete_suffix("-gcc").sub(/\A/, "gcc-"), "libc6-dev-#{info[:arch]}-cross" if info[:arch] != host_arch
  unless `rustup target list --installed`.split.include?(info[:target])
    sh "rustup", "target", "add", info[:target]
  end
  env = native_build_env(platform, abi)
  env["CARGO_TARGET_#{info[:target].upcase.tr('-', '_')}_LINKER"] = info[:gcc]
  env["CIRCUIT_BREAKER_PORTABLE"] = nil
  # One target directory per Ruby: each keeps its own rb-sys build. Always
  # --target, so that the library is read from the target's own directory,
  # never from a host build's target/release/.
  target_dir = "target/native/#{abi}"
  sh env, "cargo", "build", "--locked", "--release", "-p", "circuit_breaker",
     "--target", info[:target], "--target-dir", target_dir
  "#{target_dir}/#{info[:target]}/release/libcircuit_breaker.so"
end

# The newest glibc symbol version `library` asks for must be the floor
# docs/install.md states (readelf reads either architecture's symbols).
def check_glibc_floor(library)
  floor = `readelf -W --dyn-syms #{library}`.scan(/@GLIBC_([\d.]+)/).flatten.max_by { |v| Gem::Version.new(v) }
  documented = File.read(File.expand_path("../docs/install.md", __dir__))[/glibc floor is ([\d.]+)/, 1]
  stated = CircuitBreakerPrecompiled::GLIBC_FLOOR
  return if floor && floor == documented && floor == stated

  abort "#{library} needs glibc #{floor.inspect}; docs/install.md says #{documented.inspect}, " \
        "ext/circuit_breaker/precompiled.rb #{stated.inspect}: update them"
end

# The platform gem for `platform` holding `libraries` (ABI => library).
def build_native_gem(platform, libraries)
  stage = "tmp/native/#{platform}"
  rm_rf stage
  spec = GEMSPEC.dup
  spec.platform = Gem::Platform.new(platform)
  spec.extensions = []
  files = spec.files.grep_v(%r{\A(ext|vendor)/|\ACargo\.})
  files.each do |f|
    mkdir_p File.dirname("#{stage}/#{f}"), verbose: false
    cp f, "#{stage}/#{f}", verbose: false
  end
  libraries.each do |abi, library|
    dest = "lib/circuit_breaker/#{abi}/circuit_breaker.so"
    mkdir_p "#{stage}/lib/circuit_breaker/#{abi}", verbose: false
    cp library, "#{stage}/#{dest}"
    files << dest
  end
  spec.files = files
  # A library loads only into the Ruby ABI it was built for. RubyGems cannot
  # say "3.1, 3.3 or 3.4", so the range spans them; on a Ruby between them
  # (3.2) the loader says which it carries and what the source gem needs
  # (docs/install.md).
  abis = libraries.keys.sort_by { |abi| Gem::Version.new(abi) }
  spec.required_ruby_version = [">= #{abis.first}", "< #{abis.last.succ}.dev"]
  file = Dir.chdir(stage) { Gem::Package.build(spec) }
  mv "#{stage}/#{file}", "pkg/#{file}"
end

namespace :native do
  NATIVE_PLATFORMS.each_key do |platform|
    desc "Build pkg/circuit_breaker-#{GEMSPEC.version}-#{platform}.gem (Ruby #{NATIVE_RUBIES.keys.join(', ')})"
    task platform => "pkg" do
      libraries = NATIVE_RUBIES.keys.to_h do |abi|
        library = native_library(platform, abi)
        check_glibc_floor(library)
        [abi, library]
      end
      build_native_gem(platform, libraries)
    end
  end

  desc "Build the platform gems: #{NATIVE_PLATFORMS.keys.join(', ')}"
  task gem: NATIVE_PLATFORMS.keys
end
