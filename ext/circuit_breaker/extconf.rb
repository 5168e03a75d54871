# frozen_string_literal: true

# Writes a Makefile that builds the Rust extension with cargo. The rb_sys gem
# is not used: this file is the whole glue, so the gem installs with nothing
# but Ruby, cargo and libclang (for rb-sys's bindgen) on the machine. The
# platform gem (`rake native:gem`) carries the built library and never runs
# this file (docs/install.md).
require "mkmf"
require "rbconfig"
require_relative "precompiled"

crate_dir = __dir__
root = File.expand_path("../..", crate_dir)
# A checkout reuses its target/ between builds; an installed gem builds in a
# private target/ and removes it once the library is installed.
checkout = File.exist?(File.join(root, ".git"))
# A source gem built by `rake gem` carries every crate it needs in
# vendor/crates: cargo reads them there (source replacement) and never asks
# crates.io, so the gem installs offline.
vendor = File.join(root, "vendor", "crates")
vendored = !checkout && File.directory?(vendor)
# The directory RubyGems (or Bundler) unpacked this gem into, which a failed
# install removes whole: nothing of a failed install stays behind (the
# vendored crates alone are about 30 MB). Only when it is surely that: the
# source gem's vendored crates, no .git, and a `gems/` directory above it
# (GEM_HOME/gems/circuit_breaker-VERSION), never a checkout.
unpacked = root if vendored && File.basename(File.dirname(root)) == "gems" &&
                   File.basename(root).start_with?("circuit_breaker-")

# Before compiling: every tool the build needs, each missing one named with
# the command that installs it, in one message, then the unpacked gem
# removed. Without this the build fails late (bindgen's panic after ~40 s
# when libclang is missing) or in mkmf's noise.
rust_version = File.read(File.join(root, "Cargo.toml"))[/^rust-version\s*=\s*"([\d.]+)"/, 1]
missing = {}
cargo = find_executable("cargo")
# A version cargo does not print as expected is left to cargo itself.
cargo_version = `cargo --version 2>/dev/null`[/\Acargo (\d+\.\d+(?:\.\d+)?)/, 1] if cargo
if cargo.nil?
  missing[:cargo] = "cargo (Rust #{rust_version} or newer) is not on PATH"
elsif cargo_version && rust_version && Gem::Version.new(cargo_version) < Gem::Version.new(rust_version)
  missing[:cargo] = "cargo #{cargo_version} is older than the Rust #{rust_version} the crates need"
end

# libclang, where rb-sys's bindgen looks for it (clang-sys's search):
# LIBCLANG_PATH alone when set, else llvm-config's prefix, the library
# paths, and the system's usual directories.
def libclang_found?
  names = %w[libclang.so libclang-*.so libclang.so.* libclang-*.so.* libclang.dylib]
  dirs = if ENV["LIBCLANG_PATH"]
           [ENV["LIBCLANG_PATH"], File.dirname(ENV["LIBCLANG_PATH"])]
         else
           prefix = `llvm-config --prefix 2>/dev/null`.strip if find_executable("llvm-config")
           xcode = `xcode-select --print-path 2>/dev/null`.strip if RUBY_PLATFORM.include?("darwin")
           [*(%w[bin lib lib64].map { |d| File.join(prefix, d) } if prefix && !prefix.empty?),
            *(File.join(xcode, "Toolchains/XcodeDefault.xctoolchain/usr/lib") if xcode && !xcode.empty?),
            *ENV.fetch("LD_LIBRARY_PATH", "").split(File::PATH_SEPARATOR),
            *ENV.fetch("LIBRARY_PATH", "").split(File::PATH_SEPARATOR),
            "/usr/local/llvm*/lib*", "/usr/local/lib*/*/*", "/usr/local/lib*/*", "/usr/local/lib*",
            "/usr/lib*/*/*", "/usr/lib*/*", "/usr/lib*",
            "/usr/local/opt/llvm*/lib", "/opt/homebrew/opt/llvm*/lib",
            "/Library/Developer/CommandLineTools/usr/lib",
            "/Applications/Xcode.app/Contents/Developer/Toolchains/XcodeDefault.xctoolchain/usr/lib"]
         end
  dirs.reject(&:empty?).any? do |dir|
    Dir.glob(dir).any? { |d| names.any? { |n| !Dir.glob(File.join(d, n)).empty? } }
  end
end
checking_for("libclang (for rb-sys's bindgen)") { libclang_found? } ||
  (missing[:libclang] = "libclang (rb-sys runs bindgen on Ruby's headers) was not found" \
                        "#{" in LIBCLANG_PATH=#{ENV['LIBCLANG_PATH']}" if ENV['LIBCLANG_PATH']}")

# The C compiler: cargo links with it (`cc`), and rb-sys compiles a few C
# functions with it ($CC when set).
compiler = ENV.fetch("CC", "cc").split.first
missing[:cc] = "a C compiler (#{compiler}) is not on PATH" unless find_executable(compiler)

unless missing.empty?
  # The packages that bring each missing tool.
  debian = { cargo: "cargo", libclang: "libclang-dev", cc: "gcc" }
  alpine = { cargo: "cargo", libclang: "clang-dev", cc: "gcc musl-dev" }
  commands = ["  Debian/Ubuntu:  sudo apt-get install #{debian.values_at(*missing.keys).join(' ')}" \
              "#{'   (Debian 12: cargo-web instead of cargo, whose Rust is too old)' if missing[:cargo]}",
              "  Alpine:         apk add #{alpine.values_at(*missing.keys).join(' ')}",
              "  macOS:          " + [("xcode-select --install   (libclang and the C compiler)" if missing[:libclang] || missing[:cc]),
                                      ("brew install rust" if missing[:cargo])].compact.join("; ")]
  commands << "  any system:     rustup, https://rustup.rs (any Rust version)" if missing[:cargo]
  commands << "Installed somewhere else? Set LIBCLANG_PATH to libclang's directory." if missing[:libclang]

  # Would a precompiled gem have served this machine? Said so only when it
  # would, so the two gems never send a user back and forth.
  glibc = `getconf GNU_LIBC_VERSION 2>/dev/null`[/glibc (\d+\.\d+)/, 1]
  platform = CircuitBreakerPrecompiled.platform_for(RUBY_VERSION, RbConfig::CONFIG)
  platform = nil if glibc.nil? || Gem::Version.new(glibc) < Gem::Version.new(CircuitBreakerPrecompiled::GLIBC_FLOOR)
  machine = "Ruby #{RUBY_VERSION}, #{RbConfig::CONFIG['target_cpu']}-#{RbConfig::CONFIG['target_os']}" \
            "#{", glibc #{glibc}" if glibc}"
  precompiled = if platform
                  "This machine (#{machine}) can take it instead: gem install circuit_breaker --platform #{platform}\n" \
                    "(Bundler: `bundle lock --add-platform #{platform}`, without force_ruby_platform for this gem)."
                else
                  "This machine (#{machine}) is not among them: install the tools above."
                end
  FileUtils.rm_rf(unpacked) if unpacked
  # exit!, not abort: mkmf's exit handler would print its own guesses
  # ("probably lack of necessary libraries") after this.
  warn <<~MSG

    circuit_breaker: cannot build the native extension (it is written in Rust):
    #{missing.values.map { |m| "  - #{m}" }.join("\n")}
    Install #{missing.size == 1 ? 'it' : 'them'}, then run the install again:
    #{commands.join("\n")}

    A precompiled gem, which needs none of this, exists for
    #{CircuitBreakerPrecompiled.summary}.
    #{precompiled}
    #{"Nothing of this install was kept: #{unpacked} was removed.\n" if unpacked}More: docs/install.md in the gem's repository.
  MSG
  exit!(1)
end

target_dir = ENV.fetch("CARGO_TARGET_DIR", File.join(root, "target"))
dlext = RbConfig::CONFIG["DLEXT"]
soext = RbConfig::CONFIG["SOEXT"] || "so"

sources = if vendored
            " --offline --config 'source.crates-io.replace-with=\"vendored\"' " \
              "--config 'source.vendored.directory=\"#{vendor}\"'"
          else
            ""
          end
# Once installed, the gem keeps neither the build tree nor the crates.
cleanup = [(target_dir unless checkout || ENV.key?("CARGO_TARGET_DIR")), (vendor if vendored)].compact
cleanup = cleanup.empty? ? "" : "\trm -rf #{cleanup.join(' ')}\n"
# A failed (or interrupted) build removes the unpacked gem, or at least the
# private build tree, before it fails: a failed install leaves nothing.
failed = [unpacked || (target_dir unless checkout || ENV.key?("CARGO_TARGET_DIR"))].compact
fail_recipe = "{ #{"rm -rf #{failed.join(' ')}; " unless failed.empty?}" \
              "echo \"circuit_breaker: the build failed (above)#{"; #{failed.join(' ')} was removed" unless failed.empty?}" \
              "; docs/install.md\" >&2; exit 1; }"

# Where the library goes. A checkout: where rake-compiler asks (sitearchdir,
# then lib/circuit_breaker/). An installed gem: straight into the gem's own
# lib/circuit_breaker/, like the platform gem, and nothing into sitearchdir.
# RubyGems copies what lands in sitearchdir twice (the extension directory,
# and the gem's lib/ too while install_extension_in_lib is on); this way the
# library is installed once.
# (rake-compiler copies the built file again, so a checkout keeps it.)
install_dir = checkout ? "$(sitearchdir)$(target_prefix)" : File.join(root, "lib", "circuit_breaker")
take = checkout ? "cp" : "mv -f"

# The test-only native methods (docs/development.md, "Test hooks"): `rake
# compile`, the suite's build, passes --enable-test-hooks; a gem's install
# and `rake native:gem` (which runs cargo itself) never do.
features = enable_config("test-hooks", false) ? " --features test-hooks" : ""

File.write("Makefile", <<~MAKE)
  # Generated by #{__FILE__}
  RUBY := #{RbConfig.ruby}
  sitearchdir ?= #{RbConfig::CONFIG['sitearchdir']}
  # As in mkmf's Makefiles: RubyGems keeps it, rake-compiler empties it.
  target_prefix ?= /circuit_breaker
  DLLIB := circuit_breaker.#{dlext}
  # Read when make runs, so that one generated Makefile builds any of them:
  # CIRCUIT_BREAKER_PROFILE=profiling keeps symbols (Cargo.toml);
  # CIRCUIT_BREAKER_PORTABLE=1 forces the code paths of non-Linux systems.
  CIRCUIT_BREAKER_PROFILE ?= release
  FEATURES := $(if $(filter 1,$(CIRCUIT_BREAKER_PORTABLE)),--features portable)

  # What RubyGems and rake-compiler run: `make` and `make install`, each of
  # which runs its steps in a make of its own and, when one fails or is
  # interrupted, runs FAILED: it removes what this install unpacked or built.
  FAILED := #{fail_recipe}

  all:
  	@trap '$(FAILED)' INT TERM; $(MAKE) --no-print-directory build || $(FAILED)

  install:
  	@trap '$(FAILED)' INT TERM; $(MAKE) --no-print-directory install-library || $(FAILED)

  .PHONY: all install build install-library clean cargo

  build: $(DLLIB)

  cargo:
  	RUBY="$(RUBY)" cargo build --locked#{sources} --profile $(CIRCUIT_BREAKER_PROFILE) $(FEATURES)#{features} --manifest-path #{File.join(root, 'Cargo.toml')} -p circuit_breaker --target-dir #{target_dir}

  $(DLLIB): cargo
  	cp #{target_dir}/$(CIRCUIT_BREAKER_PROFILE)/libcircuit_breaker.#{soext} $(DLLIB)

  install-library: $(DLLIB)
  	mkdir -p #{install_dir}
  	# Renamed into place: a running process may have the old library mapped.
  	#{take} $(DLLIB) #{install_dir}/$(DLLIB).tmp
  	mv -f #{install_dir}/$(DLLIB).tmp #{install_dir}/$(DLLIB)
  #{cleanup}
  clean:
  \trm -f $(DLLIB)
MAKE
