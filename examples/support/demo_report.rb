# frozen_string_literal: true

require "cgi"
require "fileutils"

class CircuitBreaker
  module Examples
    # Writes bin/demo's run as one self-contained HTML file: a summary, an
    # inline SVG chart (breaker state bands, upstream phases, the window's
    # error and slow-call rates, the share of calls admitted) and the list of
    # transitions. No scripts, no external assets.
    #
    # @example
    #   DemoReport.new(phases: [[:healthy, 0.0, 5.0]], samples: [...], ticks: [...],
    #                  events: [...], summary: {...}).write("tmp/demo-report.html")
    class DemoReport
      STATE_COLORS = {
        closed: "#d9f2df", open: "#f8d0d0", half_open: "#fbeac2", forced_open: "#f0b0b0", disabled: "#e4e4e4"
      }.freeze
      STATE_LABELS = { closed: "closed", open: "open", half_open: "half-open", forced_open: "forced open",
                       disabled: "disabled" }.freeze
      SERIES = [
        [:error_rate, "#c62828", "window error rate", ""],
        [:slow_call_rate, "#6a1b9a", "window slow-call rate", ""],
        [:admitted, "#1565c0", "admitted share (measured per tick)", ""],
        [:admit_share, "#1565c0", "ramp share (breaker)", "5,4"]
      ].freeze

      W = 1100
      H = 430
      LEFT = 56
      RIGHT = 20
      TOP = 58
      BOTTOM = 56
      HEADROOM = 10

      # @param phases [Array<Array(Symbol, Float, Float)>] name, start s, end s
      # @param samples [Array<Hash>] t, state, error_rate, slow_call_rate, admit_share, stage
      # @param ticks [Array<Hash>] t (end of tick), attempted, admitted, rejected
      # @param events [Array<Hash>] t, from, to, reason, phase
      # @param summary [Hash{String=>Object}] label => value, shown as a table
      # @param config [Hash{String=>Object}] label => value, shown as a table
      def initialize(phases:, samples:, ticks:, events:, summary:, config: {}, title: "circuit_breaker demo")
        @phases = phases
        @samples = samples
        @ticks = ticks
        @events = events
        @summary = summary
        @config = config
        @title = title
        @duration = [samples.last&.fetch(:t) || 0.0, phases.last&.at(2) || 0.0, 1.0].max
      end

      # Writes the report; creates the directory.
      # @return [String] the path written
      def write(path)
        FileUtils.mkdir_p(File.dirname(path))
        File.write(path, html)
        path
      end

      # @return [String] the whole document
      def html
        <<~HTML
          <!DOCTYPE html>
          <html lang="en">
          <head>
          <meta charset="utf-8">
          <title>#{h(@title)}</title>
          <style>
            body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px auto; max-width: #{W + 40}px; padding: 0 20px; }
            h1 { font-size: 22px; margin: 0 0 4px; }
            p.lead { color: #555; margin: 0 0 16px; }
            table { border-collapse: collapse; margin: 8px 0 20px; }
            td, th { padding: 3px 12px 3px 0; text-align: left; vertical-align: top; }
            th { color: #555; font-weight: 600; }
            td.num { text-align: right; font-variant-numeric: tabular-nums; }
            .cols { display: flex; gap: 48px; flex-wrap: wrap; }
            .tag { display: inline-block; padding: 0 6px; border-radius: 3px; }
            svg text { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; }
          </style>
          </head>
          <body>
          <h1>#{h(@title)}</h1>
          <p class="lead">A client (several threads, through Faraday and <code>CircuitBreaker::Faraday</code>) calls an upstream that
          goes bad and recovers. Background bands: the breaker's state. Lines: what the breaker's window sees, and how much
          of the traffic it let through.</p>
          #{chart}
          <div class="cols">
          <div><h2>Summary</h2>#{table(@summary)}</div>
          <div><h2>Configuration</h2>#{table(@config)}</div>
          </div>
          <h2>Transitions</h2>
          #{transitions_table}
          </body>
          </html>
        HTML
      end

      private

      def h(text)
        CGI.escapeHTML(text.to_s)
      end

      def x(t)
        LEFT + (t / @duration) * (W - LEFT - RIGHT)
      end

      # 100% sits a little below the plot's top edge, so a line at 100% shows.
      def y(share)
        TOP + HEADROOM + (1.0 - share.clamp(0.0, 1.0)) * (H - TOP - BOTTOM - HEADROOM)
      end

      def f(num)
        format("%.1f", num)
      end

      def chart
        parts = [%(<svg xmlns="http://www.w3.org/2000/svg" width="#{W}" height="#{H + 40}" viewBox="0 0 #{W} #{H + 40}" role="img" aria-label="breaker timeline">)]
        parts << %(<rect x="0" y="0" width="#{W}" height="#{H + 40}" fill="#fff"/>)
        parts.concat(state_bands)
        parts.concat(grid)
        parts.concat(phase_marks)
        parts.concat(event_marks)
        SERIES.each { |key, color, _, dash| parts << series_path(key, color, dash) }
        parts.concat(legend)
        parts << "</svg>"
        parts.join("\n")
      end

      # Consecutive samples in the same state make one band.
      def state_bands
        bands = []
        @samples.each_with_index do |s, i|
          t0 = i.zero? ? 0.0 : @samples[i - 1][:t]
          if bands.last && bands.last[0] == s[:state]
            bands.last[2] = s[:t]
          else
            bands << [s[:state], t0, s[:t]]
          end
        end
        bands.map do |state, t0, t1|
          %(<rect x="#{f(x(t0))}" y="#{TOP}" width="#{f([x(t1) - x(t0), 0.5].max)}" height="#{H - TOP - BOTTOM}" fill="#{STATE_COLORS.fetch(state, '#eee')}"><title>#{h(STATE_LABELS.fetch(state, state))} #{f(t0)}–#{f(t1)} s</title></rect>)
        end
      end

      def grid
        out = []
        [0.0, 0.25, 0.5, 0.75, 1.0].each do |share|
          out << %(<line x1="#{LEFT}" x2="#{W - RIGHT}" y1="#{f(y(share))}" y2="#{f(y(share))}" stroke="#999" stroke-opacity="0.35"/>)
          out << %(<text x="#{LEFT - 6}" y="#{f(y(share) + 4)}" font-size="11" text-anchor="end" fill="#555">#{(share * 100).round}%</text>)
        end
        step = nice_step(@duration)
        t = 0.0
        while t <= @duration + 1e-9
          out << %(<line x1="#{f(x(t))}" x2="#{f(x(t))}" y1="#{H - BOTTOM}" y2="#{H - BOTTOM + 5}" stroke="#555"/>)
          out << %(<text x="#{f(x(t))}" y="#{H - BOTTOM + 18}" font-size="11" text-anchor="middle" fill="#555">#{t.round(1) == t.round ? t.round : t.round(1)} s</text>)
          t += step
        end
        out << %(<rect x="#{LEFT}" y="#{TOP}" width="#{W - LEFT - RIGHT}" height="#{H - TOP - BOTTOM}" fill="none" stroke="#555"/>)
        out
      end

      def nice_step(span)
        raw = span / 10.0
        mag = 10**Math.log10(raw).floor
        [1, 2, 5, 10].map { |m| m * mag }.find { |s| s >= raw } || raw
      end

      # Upstream phases: a label strip above the plot and dashed boundaries.
      def phase_marks
        out = []
        @phases.each_with_index do |(name, t0, t1), i|
          next if t1 <= t0

          fill = i.even? ? "#eceff1" : "#f7f8f9"
          out << %(<rect x="#{f(x(t0))}" y="#{TOP - 26}" width="#{f(x(t1) - x(t0))}" height="22" fill="#{fill}" stroke="#b0bec5"/>)
          out << %(<text x="#{f((x(t0) + x(t1)) / 2)}" y="#{TOP - 11}" font-size="12" text-anchor="middle" fill="#37474f">#{h(name.to_s.tr('_', ' '))}</text>)
          next if i.zero?

          out << %(<line x1="#{f(x(t0))}" x2="#{f(x(t0))}" y1="#{TOP}" y2="#{H - BOTTOM}" stroke="#37474f" stroke-dasharray="3,3" stroke-opacity="0.6"/>)
        end
        out << %(<text x="#{LEFT}" y="#{TOP - 34}" font-size="11" fill="#555">upstream phase</text>)
        out
      end

      # A small triangle under the axis at each transition, coloured by the
      # state entered.
      def event_marks
        @events.map do |e|
          cx = x(e[:t])
          base = H - BOTTOM
          color = { open: "#c62828", half_open: "#e0a100", closed: "#2e7d32" }.fetch(e[:to], "#555")
          %(<path d="M#{f(cx)},#{base} l-4,-7 h8 z" fill="#{color}"><title>#{f(e[:t])} s: #{h(STATE_LABELS.fetch(e[:from], e[:from]))} → #{h(STATE_LABELS.fetch(e[:to], e[:to]))} (#{h(e[:reason])})</title></path>)
        end
      end

      def series_points(key)
        if key == :admitted
          # Per tick, a step over the tick's span; ticks with no attempt are gaps.
          prev = 0.0
          @ticks.flat_map do |tk|
            t0 = prev
            prev = tk[:t]
            next [nil] if tk[:attempted].zero?

            share = tk[:admitted].to_f / tk[:attempted]
            [[t0, share], [tk[:t], share]]
          end
        else
          # The window's rates mean nothing while it is empty (the breaker
          # empties it on opening): gaps there.
          @samples.map do |s|
            next nil if key != :admit_share && s[:total].zero?

            [s[:t], s[key]]
          end
        end
      end

      def series_path(key, color, dash)
        d = +""
        pen_up = true
        series_points(key).each do |pt|
          if pt.nil?
            pen_up = true
            next
          end
          d << (pen_up ? "M" : "L") << "#{f(x(pt[0]))},#{f(y(pt[1]))} "
          pen_up = false
        end
        width = key == :admit_share ? 1.5 : 2
        dash_attr = dash.empty? ? "" : %( stroke-dasharray="#{dash}")
        %(<path d="#{d.strip}" fill="none" stroke="#{color}" stroke-width="#{width}" stroke-linejoin="round"#{dash_attr}/>)
      end

      def legend
        out = []
        lx = LEFT
        ly = H - BOTTOM + 40
        SERIES.each do |_, color, label, dash|
          dash_attr = dash.empty? ? "" : %( stroke-dasharray="#{dash}")
          out << %(<line x1="#{lx}" x2="#{lx + 22}" y1="#{ly}" y2="#{ly}" stroke="#{color}" stroke-width="2"#{dash_attr}/>)
          out << %(<text x="#{lx + 28}" y="#{ly + 4}" font-size="12" fill="#333">#{h(label)}</text>)
          lx += 40 + label.size * 6.4
        end
        %i[closed half_open open].each do |state|
          out << %(<rect x="#{lx}" y="#{ly - 7}" width="16" height="14" fill="#{STATE_COLORS[state]}" stroke="#999"/>)
          out << %(<text x="#{lx + 22}" y="#{ly + 4}" font-size="12" fill="#333">#{STATE_LABELS[state]}</text>)
          lx += 40 + STATE_LABELS[state].size * 6.4
        end
        out
      end

      def table(rows)
        body = rows.map { |k, v| %(<tr><th>#{h(k)}</th><td class="num">#{h(v)}</td></tr>) }.join("\n")
        "<table>#{body}</table>"
      end

      def transitions_table
        return "<p>None.</p>" if @events.empty?

        rows = @events.map do |e|
          tag = %(<span class="tag" style="background:#{STATE_COLORS.fetch(e[:to], '#eee')}">#{h(STATE_LABELS.fetch(e[:to], e[:to]))}</span>)
          %(<tr><td class="num">#{f(e[:t])} s</td><td>#{h(e[:phase].to_s.tr('_', ' '))}</td><td>#{h(STATE_LABELS.fetch(e[:from], e[:from]))} → #{tag}</td><td>#{h(e[:reason])}</td></tr>)
        end
        "<table><tr><th>time</th><th>upstream phase</th><th>transition</th><th>reason</th></tr>\n#{rows.join("\n")}</table>"
      end
    end
  end
end
