# frozen_string_literal: true

require "net/http"
require "circuit_breaker/adapters"

class CircuitBreaker
  module Adapters
    # Net::HTTP (and so the clients built on it: HTTParty, RestClient,
    # Faraday's net_http adapter) behind breakers, for the hosts the app
    # names with {NetHTTP.protect}; every other host is left alone.
    # Loaded only by `require "circuit_breaker/net_http"`, which prepends
    # one module to Net::HTTP (docs/adapters.md, "Net::HTTP").
    #
    # One request is one call of the breaker: the connection it opens (when
    # the request starts the session) and the response. A session opened
    # with `Net::HTTP.start` records a failed connect as a failure; while
    # the breaker is half-open its connect is a probe. A response
    # whose status is in `failure_statuses` (default 500..599) is returned
    # as Net::HTTP returns it and recorded as a failure; an exception in
    # `failure_errors` (connection errors, timeouts, a broken response) is
    # raised and recorded as a failure; any other exception (raised by the
    # app's own block reading the body, say) is raised and recorded as a
    # success. When the breaker rejects, no connection is made and
    # {NetHTTP::OpenError} is raised.
    #
    # @example
    #   require "circuit_breaker/net_http"
    #   CircuitBreaker::Adapters::NetHTTP.protect("orders.internal", open_duration: 10)
    #   Net::HTTP.get(URI("http://orders.internal/api/orders"))  # through the breaker "net_http:orders.internal:80"
    module NetHTTP
      # Raised instead of a request when the breaker is open: a refused
      # connection, as far as the app's `rescue Errno::ECONNREFUSED`,
      # `rescue SystemCallError` or Faraday's ConnectionFailed are
      # concerned, and a {CircuitBreaker::OpenError} for
      # `rescue CircuitBreaker::OpenError`.
      class OpenError < ::Errno::ECONNREFUSED
        include CircuitBreaker::Rejection
      end

      # What a failed request raises, by default (Semian's list):
      # connection errors and timeouts (Net::OpenTimeout and
      # Net::ReadTimeout are Timeout::Errors), broken responses, TLS errors.
      DEFAULT_FAILURE_ERRORS = [
        ::Timeout::Error, ::SocketError, ::SystemCallError, ::IOError, ::EOFError,
        ::Net::ProtocolError, ::Net::HTTPBadResponse, ::Net::HTTPHeaderSyntaxError,
        *([::OpenSSL::SSL::SSLError] if defined?(::OpenSSL::SSL::SSLError))
      ].freeze

      DEFAULT_FAILURE_STATUSES = (500..599)

      # One `protect` call: which hosts, which breaker, what fails.
      # @api private
      Rule = Struct.new(:hosts, :breaker, :options, :failure_statuses, :failure_errors) do
        # `host` is the address as {NetHTTP.host} gives it (lower case, an
        # IPv6 literal without brackets); a Regexp sees Net::HTTP's own.
        def match?(address, host, port)
          hosts.any? do |h|
            case h
            when :all then true
            when Regexp then h.match?("#{address}:#{port}")
            when Array then h[0] == host && (h[1].nil? || h[1] == port)
            end
          end
        end
      end

      # Carries a failed response out of `breaker.call`.
      # @api private
      class FailedResponse < CircuitBreaker::Failure
        attr_reader :response

        def initialize(response)
          @response = response
          super("HTTP #{response.code}")
          set_backtrace([]) # never raised past the adapter: spare the capture
        end
      end

      # One breaker per host:port: max_breakers, max_breakers= and clear!
      # (which here forgets every protect too).
      @breakers = BreakerSet.new("net_http")
      extend OwnBreakers
      @rules = [].freeze
      @generation = 0
      @lock = Mutex.new

      class << self
        # Puts requests to the given hosts behind breakers; later calls add
        # hosts (the first `protect` that names a host decides for it).
        #
        # @example One breaker per host:port (the default), every host
        #   CircuitBreaker::Adapters::NetHTTP.protect(:all)
        # @example Two hosts, one breaker named "partners", 502s only
        #   CircuitBreaker::Adapters::NetHTTP.protect("a.example", "b.example:8443",
        #                                             breaker: "partners", failure_statuses: [502])
        # @param hosts [Array<String, Regexp, :all>] "host" (any port),
        #   "host:port", an IPv6 literal ("::1", "[::1]", "[::1]:8080"), a
        #   URL without a path, a Regexp matched against "address:port", or
        #   :all; host names match case-insensitively
        # @raise [ArgumentError] a host that can never match: empty, a port
        #   outside 1..65535, a path
        # @param breaker [CircuitBreaker, String, Symbol, nil] one breaker for
        #   every request to these hosts (a registry name is created with
        #   `breaker_options` by {CircuitBreaker.for}); nil: a breaker per
        #   host:port, named "net_http:HOST:PORT", at most {max_breakers}
        # @param failure_statuses [Range, Array<Integer>, Integer] response
        #   statuses recorded as failures
        # @param failure_errors [Array<Class, Proc>] exceptions recorded as
        #   failures (others pass as successes)
        # @param breaker_options [Hash] options of {CircuitBreaker.new} for
        #   the breakers created here
        # @return [nil]
        def protect(*hosts, breaker: nil, failure_statuses: DEFAULT_FAILURE_STATUSES,
                    failure_errors: DEFAULT_FAILURE_ERRORS, **breaker_options)
          raise ArgumentError, "NetHTTP.protect: name at least one host (or :all)" if hosts.empty?

          if breaker.is_a?(CircuitBreaker) && !breaker_options.empty?
            raise ArgumentError, "NetHTTP.protect: breaker options (#{breaker_options.keys.join(', ')}) " \
                                 "cannot apply to a CircuitBreaker object"
          end

          rule = Rule.new(hosts.map { |h| check_host(h) }.freeze, check_breaker(breaker), breaker_options.freeze,
                          check_statuses(failure_statuses), Adapters.check_failures(failure_errors, "NetHTTP.protect"))
          @lock.synchronize do
            @rules = (@rules + [rule]).freeze
            @generation += 1
          end
          nil
        end

        # Forgets every {protect} and the breakers created for them (for
        # test suites; the registry keeps the breakers until
        # `CircuitBreaker.forget_all!`).
        # @return [nil]
        def clear!
          @lock.synchronize do
            @rules = [].freeze
            @generation += 1
          end
          super
        end

        # The rule and breaker of a host, or nil when it is not protected.
        # @api private
        def lookup(address, port)
          rules = @rules
          host = host(address)
          rule = rules.find { |r| r.match?(address, host, port) }
          return nil unless rule

          breaker = case rule.breaker
                    when nil then @breakers.fetch("#{host.include?(':') ? "[#{host}]" : host}:#{port}", rule.options)
                    when CircuitBreaker then rule.breaker
                    else CircuitBreaker.for(rule.breaker, **rule.options)
                    end
          [rule, breaker].freeze
        end

        # Moves on at each {protect} and {clear!} (rather than at each
        # clear! alone, as other adapters' generation does).
        # @api private
        attr_reader :generation

        # A host as rules compare it: host names are case-insensitive, and
        # an IPv6 literal is the same with or without its brackets
        # (`URI#hostname` drops them, `URI#host` keeps them).
        # @api private
        def host(address)
          address.to_s.downcase.delete_prefix("[").delete_suffix("]")
        end

        private

        # "host", "host:port", an IPv6 literal ("::1", "[::1]",
        # "[::1]:8080") or a URL without a path ("https://host:8443"):
        # [host, port or nil]. An ArgumentError only for what can never
        # match a request: no host, a port outside 1..65535, a path.
        def check_host(host)
          case host
          when :all, Regexp then host
          when String
            name, port = split_host(host)
            raise ArgumentError, "NetHTTP.protect: host must not be empty (got #{host.inspect})" if name.to_s.empty?

            [host(name).freeze, port.nil? ? nil : check_port(port, host)].freeze
          else
            raise TypeError, "NetHTTP.protect: a host must be a String (\"host\" or \"host:port\"), " \
                             "a Regexp or :all (got #{host.inspect})"
          end
        end

        def split_host(host)
          if host.match?(%r{\A[a-z][a-z0-9+.-]*://}i)
            uri = begin
              URI.parse(host)
            rescue URI::InvalidURIError => e
              raise ArgumentError, "NetHTTP.protect: #{host.inspect} is not a URL Net::HTTP can request (#{e.message})"
            end
            unless ["", "/"].include?(uri.path.to_s) && uri.query.nil? && uri.fragment.nil?
              raise ArgumentError, "NetHTTP.protect: a host, not a URL with a path (got #{host.inspect}; " \
                                   "give #{uri.hostname.to_s.inspect} or \"host:port\")"
            end
            [uri.hostname, uri.port]
          elsif host.include?("/")
            raise ArgumentError, "NetHTTP.protect: a host, not a path (got #{host.inspect}; give \"host\" or \"host:port\")"
          elsif host.start_with?("[")
            match = host.match(/\A\[([^\]]*)\](?::(.*))?\z/m)
            raise ArgumentError, "NetHTTP.protect: an IPv6 literal is \"[address]\" or \"[address]:port\" (got #{host.inspect})" unless match

            [match[1], match[2]]
          elsif host.count(":") > 1
            [host, nil] # an IPv6 literal without brackets: any port
          else
            host.split(":", 2)
          end
        end

        def check_port(port, host)
          value = port.is_a?(Integer) ? port : (Integer(port, 10) if port.match?(/\A\d+\z/))
          return value if value&.between?(1, 65_535)

          raise ArgumentError, "NetHTTP.protect: the port of #{host.inspect} must be an Integer in 1..65535"
        end

        def check_breaker(breaker)
          case breaker
          when nil, CircuitBreaker then breaker
          when String, Symbol then breaker.to_s.freeze
          else raise TypeError, "NetHTTP.protect: breaker: must be a CircuitBreaker, a registry name or nil (got #{breaker.class})"
          end
        end

        def check_statuses(statuses)
          case statuses
          when Integer then [statuses].freeze
          when Range, Array then statuses
          else raise TypeError, "NetHTTP.protect: failure_statuses: must be a Range, an Array of Integers or an Integer (got #{statuses.class})"
          end
        end
      end

      # Prepended to Net::HTTP.
      # @api private
      module Patch
        def request(req, body = nil, &block)
          # A request that starts its session calls itself once started:
          # the outer call covers both.
          return super if @circuit_breaker_busy

          entry = circuit_breaker_entry
          return super unless entry

          circuit_breaker_run(entry) do
            response = super
            raise FailedResponse, response if entry[0].failure_statuses.include?(response.code.to_i)

            response
          end
        end

        private

        # A session opened before any request (`Net::HTTP.start`, which
        # `Net::HTTP.get` uses): its requests are the calls, the connect is
        # judged as Adapters.connect says.
        def connect
          return super if @circuit_breaker_busy

          entry = circuit_breaker_entry
          return super unless entry

          @circuit_breaker_busy = true
          begin
            Adapters.connect(entry[1], OpenError, entry[0].failure_errors) { super }
          ensure
            @circuit_breaker_busy = false
          end
        end

        def circuit_breaker_run(entry, &block)
          @circuit_breaker_busy = true
          Adapters.run(entry[1], OpenError, entry[0].failure_errors, &block)
        rescue FailedResponse => e
          e.response
        ensure
          @circuit_breaker_busy = false
        end

        # Looked up once per Net::HTTP object (its address and port never
        # change), again after `protect` or `clear!`.
        def circuit_breaker_entry
          generation = NetHTTP.generation
          unless @circuit_breaker_generation == generation
            @circuit_breaker_entry = NetHTTP.lookup(address, port)
            @circuit_breaker_generation = generation
          end
          @circuit_breaker_entry
        end
      end
    end
  end
end

Net::HTTP.prepend(CircuitBreaker::Adapters::NetHTTP::Patch)
