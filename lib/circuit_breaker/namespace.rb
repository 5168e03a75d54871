# frozen_string_literal: true

require "zlib"

class CircuitBreaker
  class << self
    # The namespace of `shared:` breakers built without `namespace:`: the
    # value set with {default_namespace=} (CircuitBreaker.configure sets it
    # from its `namespace` setting), else one derived from the application's
    # directory and environment, so that two applications, or a test run and
    # a development server of one checkout, never share a breaker by
    # accident (docs/shared.md).
    #
    # @example
    #   Dir.chdir("/srv/shop") { ENV["RACK_ENV"] = "production"; CircuitBreaker.default_namespace }
    #   # => "shop.7a3c51e0.production"
    # @return [String]
    def default_namespace
      @default_namespace || derived_namespace
    end

    # Sets the namespace of `shared:` breakers built afterwards without
    # `namespace:`; nil restores the derived one.
    #
    # @example
    #   CircuitBreaker.default_namespace = "shop"
    # @param value [String, Symbol, nil]
    # @return [String, Symbol, nil] value
    def default_namespace=(value)
      @default_namespace = value.nil? ? nil : Keys.key(:namespace, value, empty: true)
    end

    private

    # `<directory>[.<Rails app>].<hash of its path>.<environment><TEST_ENV_NUMBER>`:
    # Rails.root when Rails is loaded, else the working directory; the
    # Rails application's module (`Shop` for Shop::Application), so two
    # apps deployed at the same path in two containers that share /dev/shm
    # stay apart; RAILS_ENV, RACK_ENV or APP_ENV, else "development";
    # TEST_ENV_NUMBER (parallel_tests' workers: "", "2", "3"…) keeps
    # parallel test processes apart.
    def derived_namespace
      root = (defined?(::Rails) && ::Rails.respond_to?(:root) && ::Rails.root&.to_s) || Dir.pwd
      env = ENV["RAILS_ENV"] || ENV["RACK_ENV"] || ENV["APP_ENV"] || "development"
      dir = [File.basename(root)[0, 40], rails_app_name].compact.join(".")
      format("%<dir>s.%<hash>08x.%<env>s%<worker>s", dir: dir, hash: Zlib.crc32(root), env: env[0, 20],
                                                     worker: ENV["TEST_ENV_NUMBER"].to_s[0, 10])
    end

    # The Rails application's top module name, nil without one.
    def rails_app_name
      return nil unless defined?(::Rails) && ::Rails.respond_to?(:application) && ::Rails.application

      ::Rails.application.class.name.to_s.split("::").first&.slice(0, 40)
    end
  end
end
