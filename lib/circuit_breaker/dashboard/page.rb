# frozen_string_literal: true

require "cgi"
require "erb"
require "socket"
require "rack/utils"
require "circuit_breaker/text"

class CircuitBreaker
  class Dashboard
    # The HTML page: lib/circuit_breaker/dashboard/page.html.erb around a
    # row per breaker (state, rates, counters, retry-after, a chart of
    # recent states, the action buttons).
    # @api private
    class Page
      STATES = %i[closed half_open open forced_open disabled].freeze
      COLORS = { closed: "#2e7d32", half_open: "#f9a825", open: "#c62828", forced_open: "#6a1b9a",
                 disabled: "#757575" }.freeze
      private_constant :STATES, :COLORS

      # @param history [History] the states seen, for the charts
      # @param refresh [Integer, nil] seconds between reloads of the page (nil: none)
      def initialize(history, refresh)
        @history = history
        @refresh = refresh
      end

      # @param base [String] where the dashboard is mounted (the request's script_name)
      # @param token [String] the CSRF token the forms carry
      # @param snapshots [Array(String, Hash, Boolean)] name, metrics and
      #   whether its cap is adaptive, of each breaker
      # @return [String]
      def render(base, token, snapshots)
        rows = snapshots.map { |name, m, adaptive| row(base, name, m, adaptive, token) }.join
        refresh_tag = @refresh ? %(<meta http-equiv="refresh" content="#{@refresh}">) : ""
        html(refresh_tag, rows)
      end

      template = File.join(__dir__, "page.html.erb")
      ERB.new(File.read(template)).def_method(self, "html(refresh_tag, rows)", template)
      private :html

      private

      # The states' colours, as the page's legend.
      def legend
        STATES.map { |s| %(<span><span class="state" style="background:#{COLORS[s]}">#{s}</span></span>) }.join
      end

      def row(base, name, m, adaptive, token)
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
          m[:calls], m[:successes], m[:failures_total], m[:slow_total], m[:rejected], m[:opened], cap(m, adaptive),
          %(<span class="scope" data-scope="#{h.(m[:scope])}">) +
            %(#{h.(m[:scope] == :host ? 'host-wide' : "this worker only (pid #{Process.pid})")}</span>#{fleet(m, h)}),
          chart(name), buttons
        ]
        %(<tr id="breaker-#{h.(name)}" data-state="#{h.(m[:state])}"><td>#{h.(name)}</td>#{cells.map { |c| "<td>#{c}</td>" }.join}</tr>\n)
      end

      # With max_concurrent: the calls in flight against the cap (host-wide
      # for a host-wide breaker, as the counters) and the calls refused at
      # it; "no cap" without one (docs/concurrency.md). Numbers only: the
      # metrics' Integers, nothing a user wrote. An adaptive cap says so:
      # its number is the one it has now.
      def cap(metrics, adaptive)
        in_flight = metrics[:in_flight]
        limit = metrics[:concurrency_limit]
        return %(<span class="cap">no cap</span>) unless in_flight && limit

        %(<span class="cap" data-in-flight="#{Integer(in_flight)}" data-limit="#{Integer(limit)}" ) +
          %(data-adaptive="#{adaptive ? 'true' : 'false'}">#{Integer(in_flight)} / #{Integer(limit)} in flight) +
          %(#{', adaptive' if adaptive}</span><br>) +
          %(<span class="limited">#{Integer(metrics[:limited])} limited</span>)
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
        points = @history.of(name)
        span = [[points.first ? points.first[:seconds_ago] : 0.0, 60.0].max, @history.seconds.to_f].min
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

      def format_seconds(seconds)
        seconds >= 120 ? "#{(seconds / 60.0).round} min" : "#{seconds.round} s"
      end
    end
  end
end
