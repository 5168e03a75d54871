# frozen_string_literal: true

require "json"
require "socket"
require "rack/request"
require "rack/utils"
require "circuit_breaker"
require "circuit_breaker/prometheus"
require "circuit_breaker/text"

class CircuitBreaker
  # A mountable Rack app (Rails `mount`, Sinatra, `config.ru`) that serves
  # the breakers' status and their controls (docs/operating.md):
  #
  # | request | answer |
  # |---|---|
  # | `GET /` | an HTML page: state, rates, counters, retry-after and a chart of recent states per breaker |
  # | `GET /status.json` | the same as JSON |
  # | `GET /metrics` | {Prometheus.render} |
  # | `POST /breakers/:name/:action` | `trip`, `reset`, `force_open` or `disable` (the breaker's `trip!`…) |
  # | `POST /breakers/:action?name=:name` | the same; the page's buttons post here (a name `.` or `..` is a dot segment in a path) |
  #
  # Actions are refused (403) unless the app gave an `authorize:` hook and
  # it returned truthy for the request, and unless the request carries the
  # page's CSRF token (a signed double-submit cookie: the form's hidden
  # field or an `X-CSRF-Token` header must equal the `SameSite=Strict`
  # cookie set with the page, which must carry this dashboard's signature;
  # a cross-site `Origin` or `Sec-Fetch-Site` is refused).
  # They are POST only (405 otherwise). An action on a `shared:` breaker
  # reaches every process of the host, since they share one record; with
  # `fleet:` the breaker's own `trip!`… reach the fleet.
  #
  # Reading (the page, JSON, metrics) is open to whoever reaches the mount
  # point: mount it behind the app's authentication, as for Sidekiq::Web.
  #
  # @example Rails (config/routes.rb)
  #   mount CircuitBreaker::Dashboard.new(authorize: ->(req) { req.env["warden"]&.user&.admin? }),
  #         at: "/circuit_breakers"
  # @example config.ru, behind HTTP Basic authentication
  #   map("/circuit_breakers") do
  #     use Rack::Auth::Basic, "circuit breakers" do |user, password|
  #       user == "ops" && Rack::Utils.secure_compare(password, ENV.fetch("BREAKERS_PASSWORD"))
  #     end
  #     run CircuitBreaker::Dashboard.new(authorize: ->(req) { req.env["REMOTE_USER"] == "ops" })
  #   end
  class Dashboard
    # The actions, by path segment: each calls the breaker's method of that name.
    ACTIONS = { "trip" => :trip!, "reset" => :reset!, "force_open" => :force_open!, "disable" => :disable! }.freeze
    SECURITY_HEADERS = {
      "cache-control" => "no-store",
      "x-content-type-options" => "nosniff",
      "x-frame-options" => "DENY",
      "referrer-policy" => "same-origin",
      "content-security-policy" =>
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'"
    }.freeze
    private_constant :SECURITY_HEADERS

    # @param authorize [#call, nil] called with the Rack::Request (and, when
    #   it takes three arguments, the action Symbol and the breaker name)
    #   for every action: truthy allows it. Without it every action is
    #   refused; one that takes neither 1 nor 3 arguments is an
    #   ArgumentError.
    # @param breakers [#call, Hash] the breakers shown, name => breaker, or
    #   a callable returning them (default: {CircuitBreaker.registry} at
    #   each request)
    # @param history_seconds [Numeric] how far back the chart of recent
    #   states reaches
    # @param refresh [Integer, nil] seconds between reloads of the page (nil: none)
    # @param secret [String, nil] signs the CSRF tokens; every process that
    #   serves the dashboard must have the same one (nil: Rails'
    #   `secret_key_base` under Rails, else ENV["SECRET_KEY_BASE"], else a
    #   random one of this process: docs/operating.md)
    # @param labels [Hash] constant labels added to every sample of
    #   `/metrics` (as {Prometheus.render}'s `labels:`), e.g. `{ worker: 3 }`
    # @raise [TypeError] a hook or source that cannot be called, or bad numbers
    def initialize(authorize: nil, breakers: -> { CircuitBreaker.registry }, history_seconds: 600, refresh: 5, secret: nil,
                   labels: {})
      authorization = Authorization.new(authorize)
      unless breakers.is_a?(Hash) || breakers.respond_to?(:call)
        raise TypeError, "breakers: must be a Hash of name => CircuitBreaker or respond to call (got #{breakers.class})"
      end

      history_seconds = Durations.seconds(history_seconds)
      unless history_seconds.is_a?(Numeric) && history_seconds.positive? && history_seconds.finite?
        raise ArgumentError, "history_seconds: must be a finite Numeric > 0 (got #{history_seconds.inspect})"
      end
      unless refresh.nil? || (refresh.is_a?(Integer) && refresh.positive?)
        raise ArgumentError, "refresh: must be nil or an Integer > 0 (got #{refresh.inspect})"
      end

      raise TypeError, "secret: must be nil or a String (got #{secret.class})" unless secret.nil? || secret.is_a?(String)
      raise ArgumentError, "secret: must be at least 16 bytes (got #{secret.bytesize})" if secret && secret.bytesize < 16

      Prometheus.render({}, labels: labels) # checks them, naming the option
      @labels = labels.dup.freeze
      @csrf = CSRF.new(secret)
      @authorization = authorization
      @breakers = breakers
      @history = History.new(history_seconds)
      @page = Page.new(@history, refresh)
    end

    # The Rack interface.
    # @param env [Hash] the Rack environment
    # @return [Array(Integer, Hash, Array<String>)]
    def call(env)
      request = Rack::Request.new(env)
      case request.path_info.sub(%r{/+\z}, "")
      when "" then page(request)
      when "/status.json" then only_get(request) { json(200, status_document) }
      when "/metrics" then only_get(request) { metrics }
      # The page's buttons: the name in the query string, where `.` and `..`
      # are no dot segments a browser would resolve.
      when %r{\A/breakers/([^/]+)\z} then action(request, request.GET["name"], $1)
      # Up to the last slash: a server that decodes %2F still finds the name.
      when %r{\A/breakers/(.+)/([^/]+)\z} then action(request, Rack::Utils.unescape_path($1), $2)
      else text(404, "not found")
      end
    end

    # The breakers shown: name (String) => breaker.
    # @api private
    def breakers
      source = @breakers.is_a?(Hash) ? @breakers : @breakers.call
      raise TypeError, "breakers: must give a Hash of name => CircuitBreaker (got #{source.class})" unless source.is_a?(Hash)

      source.to_h { |name, breaker| [name.to_s, breaker] }
    end

    private

    def only_get(request)
      return yield if request.get? || request.head?

      text(405, "#{request.request_method} not allowed here: GET", "allow" => "GET, HEAD")
    end

    def metrics
      [200, SECURITY_HEADERS.merge("content-type" => Prometheus::CONTENT_TYPE), [Prometheus.render(breakers, labels: @labels)]]
    end

    # The JSON document: the process that answered (a per-process
    # breaker's state is that process's only), and every breaker's scope,
    # metrics and recent states.
    def status_document
      {
        host: Socket.gethostname, pid: Process.pid,
        breakers: snapshots.map do |name, m|
          { name: Text.utf8(name), scope: m[:scope], seen_by: seen_by(m), metrics: m, history: @history.of(name) }
        end
      }
    end

    # Whose state a breaker's metrics are: the host's (every process of it
    # shares a `shared:` breaker) or only the process that answered.
    def seen_by(metrics)
      metrics[:scope] == :host ? "every process of #{Socket.gethostname}" : "this worker only (pid #{Process.pid})"
    end

    # [name, metrics, adaptive cap?] of each breaker, read once per
    # request; each read is also a history sample.
    def snapshots
      now = @history.now
      breakers.map do |name, breaker|
        m = breaker.metrics
        @history.sample(name, m[:state], now)
        [name, m, breaker.max_concurrent == :adaptive]
      end
    end

    def action(request, name, action)
      method = ACTIONS[action]
      return text(404, "unknown action #{action.inspect}: #{ACTIONS.keys.join(', ')}") unless method
      unless request.post?
        return text(405, "#{request.request_method} not allowed: actions are POST only", "allow" => "POST")
      end
      return text(403, "actions are disabled: give CircuitBreaker::Dashboard.new an authorize: hook") unless @authorization.enabled?

      form = form_of(request)
      return text(400, "unreadable form body") unless form
      return text(403, "refused: invalid or missing CSRF token") unless @csrf.ok?(request, form)

      name, breaker = find(name)
      return text(404, "no breaker named #{Text.utf8(name).inspect}") unless breaker
      return text(403, "refused by the authorize: hook") unless @authorization.allows?(request, method, name)

      # With shared: the record every process maps; with fleet: the breaker
      # carries the action to the fleet itself (docs/fleet.md).
      breaker.public_send(method)
      @history.sample(name, breaker.metrics[:state], @history.now)
      if request.get_header("HTTP_ACCEPT").to_s.include?("application/json")
        json(200, { name: Text.utf8(name), action: action, metrics: breaker.metrics })
      else
        [303, SECURITY_HEADERS.merge("location" => "#{request.script_name}/", "content-type" => "text/plain"), []]
      end
    end

    # [name, breaker] of the name a request gave (the bytes it stands for
    # in a URL, lib/circuit_breaker/text.rb), or [name, nil].
    def find(name)
      return [name.to_s, nil] unless name.is_a?(String)

      wanted = name.b
      breakers.find { |n, _| Text.bytes(n) == wanted } || [name, nil]
    end

    # The form fields, or nil when the body cannot be read: malformed,
    # nested past Rack's limit, or cut short.
    def form_of(request)
      request.POST
    rescue EOFError, ArgumentError, TypeError, RangeError
      nil
    end

    def page(request)
      return text(405, "#{request.request_method} not allowed here: GET", "allow" => "GET, HEAD") unless request.get? || request.head?

      headers = SECURITY_HEADERS.merge("content-type" => "text/html; charset=utf-8")
      token = @csrf.token_for(request, headers)
      [200, headers, [@page.render(request.script_name, token, snapshots)]]
    end

    def json(status, document)
      [status, SECURITY_HEADERS.merge("content-type" => "application/json"), [JSON.generate(document)]]
    end

    def text(status, message, extra = {})
      [status, SECURITY_HEADERS.merge("content-type" => "text/plain; charset=utf-8").merge(extra), ["#{message}\n"]]
    end
  end
end

require "circuit_breaker/dashboard/authorization"
require "circuit_breaker/dashboard/csrf"
require "circuit_breaker/dashboard/history"
require "circuit_breaker/dashboard/page"
