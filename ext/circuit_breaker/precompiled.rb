# frozen_string_literal: true

# What the platform gems carry (docs/install.md, "The two gems"). One list
# for the two places that need it: extconf.rb, which tells a user whether a
# precompiled gem would have spared them Rust, and rakelib/native.rake,
# which builds one library per Ruby below for each platform below.
module CircuitBreakerPrecompiled
  # Ruby ABIs (MAJOR.MINOR).
  RUBIES = %w[3.1 3.3 3.4].freeze
  # RubyGems platforms, each linked for glibc GLIBC_FLOOR or newer.
  PLATFORMS = %w[x86_64-linux aarch64-linux].freeze
  GLIBC_FLOOR = "2.34"

  # "Ruby 3.1, 3.3 and 3.4 on x86_64-linux and aarch64-linux (glibc 2.34 or newer)"
  def self.summary
    rubies = "#{RUBIES[0..-2].join(', ')} and #{RUBIES.last}"
    "Ruby #{rubies} on #{PLATFORMS.join(' and ')} (glibc #{GLIBC_FLOOR} or newer)"
  end

  # The platform of PLATFORMS this Ruby runs on, when its ABI is one of
  # RUBIES and its C library glibc (not musl); else nil.
  def self.platform_for(ruby_version, rbconfig)
    return nil unless RUBIES.include?(ruby_version[/\A\d+\.\d+/])
    return nil unless rbconfig["target_os"].to_s.start_with?("linux") && !rbconfig["target_os"].include?("musl")

    cpu = rbconfig["target_cpu"] == "arm64" ? "aarch64" : rbconfig["target_cpu"]
    PLATFORMS.find { |p| p == "#{cpu}-linux" }
  end
end
