# frozen_string_literal: true

require "cgi"
require "json"
require "openssl"
require "securerandom"
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
    STATES = %i[closed half_open open forced_open disabled].freeze
    COLORS = { closed: "#2e7d32", half_open: "#f9a825", open: "#c62828", forced_open: "#6a1b9a",
               disabled: "#757575" }.freeze
    COOKIE = "circuit_breaker_csrf"
    SECURITY_HEADERS = {
      "cache-control" => "no-store",
      "x-content-type-options" => "nosniff",
      "x-frame-options" => "DENY",
      "referrer-policy" => "same-origin",
      "content-security-policy" =>
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'"
    }.freeze
    private_constant :STATES, :COLORS, :COOKIE, :SECURITY_HEADERS

    # @param authorize [#call, nil] called with the Rack::Request (and, when
    #   it takes more than one argument, the action Symbol and the breaker
    #   name) for every action: truthy allows it. Without it every action
    #   is refused.
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
      raise TypeError, "authorize: must respond to call (got #{authorize.inspect})" unless authorize.nil? || authorize.respond_to?(:call)
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
      @secret = secret || default_secret
      @authorize = authorize
      @breakers = breakers
      @history_seconds = history_seconds
      @refresh = refresh
      @history = {}
      @lock = Mutex.new
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
          { name: Text.utf8(name), scope: m[:scope], seen_by: seen_by(m), metrics: m, history: history_of(name) }
        end
      }
    end

    # Whose state a breaker's metrics are: the host's (every process of it
    # shares a `shared:` breaker) or only the process that answered.
    def seen_by(metrics)
      metrics[:scope] == :host ? "every process of #{Socket.gethostname}" : "this worker only (pid #{Process.pid})"
    end

    # name => metrics, read once per request; each read is also a history sample.
    def snapshots
      now = monotonic
      breakers.map do |name, breaker|
        m = breaker.metrics
        sample(name, m[:state], now)
        [name, m]
      end
    end

    def sample(name, state, now)
      @lock.synchronize do
        list = (@history[name] ||= [])
        list << [now, state] unless list.last&.last == state
        # Keep the newest change older than the chart's start: it says what
        # the state was at the left edge.
        list.shift while list.size > 1 && list[1].first <= now - @history_seconds
        list.shift while list.size > 500
      end
    end

    # [{ state:, seconds_ago: }] of the state changes the app saw, oldest first.
    def history_of(name)
      now = monotonic
      (@lock.synchronize { @history[name]&.dup } || []).map { |t, s| { state: s, seconds_ago: (now - t).round(3) } }
    end

    def action(request, name, action)
      method = ACTIONS[action]
      return text(404, "unknown action #{action.inspect}: #{ACTIONS.keys.join(', ')}") unless method
      unless request.post?
        return text(405, "#{request.request_method} not allowed: actions are POST only", "allow" => "POST")
      end
      return text(403, "actions are disabled: give CircuitBreaker::Dashboard.new an authorize: hook") unless @authorize

      form = form_of(request)
      return text(400, "unreadable form body") unless form
      return text(403, "refused: invalid or missing CSRF token") unless csrf_ok?(request, form)

      name, breaker = find(name)
      return text(404, "no breaker named #{Text.utf8(name).inspect}") unless breaker
      return text(403, "refused by the authorize: hook") unless authorized?(request, method, name)

      # With shared: the record every process maps; with fleet: the breaker
      # carries the action to the fleet itself (docs/fleet.md).
      breaker.public_send(method)
      sample(name, breaker.metrics[:state], monotonic)
      if request.get_header("HTTP_ACCEPT").to_s.include?("application/json")
        json(200, { name: Text.utf8(name), action: action, metrics: breaker.metrics })
      else
        [303, SECURITY_HEADERS.merge("location" => "#{request.script_name}/", "content-type" => "text/plain"), []]
      end
    end

    def authorized?(request, method, name)
      args = @authorize.respond_to?(:arity) && @authorize.arity == 1 ? [request] : [request, method.to_s.chomp("!").to_sym, name]
      @authorize.call(*args) ? true : false
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

    # The token: it must be one this dashboard issued (its signature), and
    # the form or header must repeat the cookie's. An equal pair that was
    # never issued (a cookie planted by a sibling subdomain) is refused.
    def csrf_ok?(request, form)
      cookie = request.cookies[COOKIE].to_s
      given = (request.get_header("HTTP_X_CSRF_TOKEN") || form["csrf_token"]).to_s
      return false unless issued?(cookie) && Rack::Utils.secure_compare(cookie, given)
      return false if request.get_header("HTTP_SEC_FETCH_SITE").to_s == "cross-site"

      origin = request.get_header("HTTP_ORIGIN")
      origin.nil? || origin == request.base_url
    end

    # A token: 32 random bytes and their HMAC-SHA256 under the secret, in hex.
    def issue_token
      nonce = SecureRandom.hex(32)
      "#{nonce}#{OpenSSL::HMAC.hexdigest('SHA256', @secret, nonce)}"
    end

    def issued?(token)
      return false unless token.match?(/\A\h{128}\z/)

      Rack::Utils.secure_compare(OpenSSL::HMAC.hexdigest("SHA256", @secret, token[0, 64]), token[64, 64])
    end

    # Rails' secret_key_base, else SECRET_KEY_BASE, else this process's own
    # (tokens then hold only in the process that issued them).
    def default_secret
      rails = defined?(::Rails) && ::Rails.respond_to?(:application) && ::Rails.application
      from_rails = rails.respond_to?(:secret_key_base) ? rails.secret_key_base : nil
      [from_rails, ENV["SECRET_KEY_BASE"]].find { |s| s.is_a?(String) && s.bytesize >= 16 } || SecureRandom.bytes(32)
    end

    def page(request)
      return text(405, "#{request.request_method} not allowed here: GET", "allow" => "GET, HEAD") unless request.get? || request.head?

      token = request.cookies[COOKIE].to_s
      token = issue_token unless issued?(token)
      headers = SECURITY_HEADERS.merge("content-type" => "text/html; charset=utf-8")
      Rack::Utils.set_cookie_header!(headers, COOKIE,
                                     value: token, path: request.script_name.empty? ? "/" : request.script_name,
                                     httponly: true, same_site: :strict, secure: request.ssl?)
      [200, headers, [html(request, token)]]
    end

    def html(request, token)
      base = request.script_name
      rows = snapshots.map { |name, m| row(base, name, m, token) }.join
      refresh = @refresh ? %(<meta http-equiv="refresh" content="#{@refresh}">) : ""
      <<~HTML
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8">#{refresh}
        <title>Circuit breakers</title>
        <style>
          body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
          table { border-collapse: collapse; }
          th, td { padding: .35em .6em; border-bottom: 1px solid #ddd; text-align: right; vertical-align: middle; }
          th:first-child, td:first-child { text-align: left; }
          .state { color: #fff; border-radius: 3px; padding: .1em .5em; font-weight: 600; }
          form { display: inline; } button { margin: 0 .1em; } td:last-child { white-space: nowrap; }
          .legend span { margin-right: 1em; }
        </style></head>
        <body>
        <h1>Circuit breakers</h1>
        <p class="served">served by pid #{Process.pid} on #{CGI.escapeHTML(Socket.gethostname)}: a breaker of scope
        "this worker only" shows and changes this process's state only; a host-wide one, every process's of this host</p>
        <p class="legend">#{STATES.map { |s| %(<span><span class="state" style="background:#{COLORS[s]}">#{s}</span></span>) }.join}
        recent states: up to the last #{format_seconds(@history_seconds)}, as this process saw them</p>
        <table>
        <thead><tr><th>breaker</th><th>state</th><th>retry after</th><th>error rate</th><th>slow-call rate</th>
        <th>opened by</th><th>calls</th><th>successes</th><th>failures</th><th>slow</th><th>rejected</th><th>opened</th>
        <th>scope</th><th>recent states</th><th>actions</th></tr></thead>
        <tbody>
        #{rows.empty? ? '<tr><td colspan="15">no breakers registered</td></tr>' : rows}
        </tbody></table>
        </body></html>
      HTML
    end

    def row(base, name, m, token)
      h = ->(v) { CGI.escapeHTML(Text.utf8(v)) }
      query = "?name=#{Rack::Utils.escape(Text.bytes(name))}"
      tripped = m[:tripped_error_rate] ? "#{percent(m[:tripped_error_rate])} errors, #{percent(m[:tripped_slow_call_rate])} slow" : "—"
      buttons = ACTIONS.keys.map do |action|
        %(<form method="post" action="#{h.("#{base}/breakers/#{action}#{query}")}"><input type="hidden" name="csrf_token" value="#{token}">) +
          %(<button type="submit" data-breaker="#{h.(name)}">#{action.tr('_', ' ')}</button></form>)
      end.join
      cells = [
        %(<span class="state" style="background:#{COLORS.fetch(m[:state], '#000')}">#{h.(m[:state])}</span>),
        { open: "#{format('%.1f', m[:retry_after] || 0)} s", forced_open: "until reset" }.fetch(m[:state], "—"),
        "#{percent(m[:error_rate])} of #{m[:total]}", percent(m[:slow_call_rate]), tripped,
        m[:calls], m[:successes], m[:failures_total], m[:slow_total], m[:rejected], m[:opened],
        %(<span class="scope" data-scope="#{h.(m[:scope])}">) +
          %(#{h.(m[:scope] == :host ? 'host-wide' : "this worker only (pid #{Process.pid})")}</span>#{fleet(m, h)}),
        chart(name), buttons
      ]
      %(<tr id="breaker-#{h.(name)}" data-state="#{h.(m[:state])}"><td>#{h.(name)}</td>#{cells.map { |c| "<td>#{c}</td>" }.join}</tr>\n)
    end

    # With fleet: its link's status, and why it is degraded.
    def fleet(metrics, escape)
      return "" unless metrics[:fleet]

      why = metrics[:fleet_reason] ? ": #{escape.(metrics[:fleet_reason])}" : ""
      %(<br><span class="fleet" data-fleet="#{escape.(metrics[:fleet])}">fleet #{escape.(metrics[:fleet])}#{why}</span>)
    end

    # A strip of the states seen, newest right: since the first one seen
    # (at least a minute), at most history_seconds back.
    def chart(name)
      width = 240.0
      points = history_of(name)
      span = [[points.first ? points.first[:seconds_ago] : 0.0, 60.0].max, @history_seconds.to_f].min
      rects = points.each_with_index.map do |p, i|
        from = [p[:seconds_ago], span].min
        to = i + 1 < points.size ? points[i + 1][:seconds_ago] : 0.0
        x = width * (span - from) / span
        w = [width * (from - to) / span, 1.0].max
        %(<rect x="#{x.round(1)}" y="0" width="#{w.round(1)}" height="14" fill="#{COLORS.fetch(p[:state], '#000')}">) +
          %(<title>#{p[:state]} #{format_seconds(p[:seconds_ago])} ago</title></rect>)
      end
      %(<svg width="#{width.to_i}" height="14" role="img" aria-label="recent states of #{CGI.escapeHTML(Text.utf8(name))}">) +
        %(<rect width="#{width.to_i}" height="14" fill="#eee"/>#{rects.join}</svg>)
    end

    def percent(rate)
      format("%.1f%%", rate * 100)
    end

    def format_seconds(s)
      s >= 120 ? "#{(s / 60.0).round} min" : "#{s.round} s"
    end

    def json(status, document)
      [status, SECURITY_HEADERS.merge("content-type" => "application/json"), [JSON.generate(document)]]
    end

    def text(status, message, extra = {})
      [status, SECURITY_HEADERS.merge("content-type" => "text/plain; charset=utf-8").merge(extra), ["#{message}\n"]]
    end

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
