# frozen_string_literal: true

module Drill
  # What `rake drill` prints (bench/drill/run.rb): a line per run, the
  # table docs/choices.md shows (one row per setup, the median of its
  # runs), and whether a peer dominates this gem's defaults.
  module Report
    PHASES = %w[healthy errors hanging slow recovered].freeze
    HEADINGS = { "healthy" => "healthy", "errors" => "500s", "hanging" => "hanging", "slow" => "slow",
                 "recovered" => "recovered" }.freeze
    # The columns a setup is judged on, each lower is better: failing calls
    # reaching the upstream, calls that waited for the read timeout,
    # seconds back to > 95 % success, the unrelated page's p99 in its
    # worst phase.
    JUDGED = { failing: "failing calls", hung: "waited for the timeout", recovery: "seconds back to 95 %",
               page_p99: "unrelated page's worst p99" }.freeze
    PEERS = %w[stoplight semian semian-bulkhead circuitbox].freeze

    module_function

    # The figures of one run.
    def figures(result)
      lengths = result.lengths
      starts = lengths.each_index.map { |i| lengths.first(i).sum }
      recovered_at = starts.last
      main = per_phase(result.requests, starts)
      page = per_phase(result.page, starts)
      after = result.requests.select { |t, _, _| t >= recovered_at }
      slow = main["slow"] || []
      { failing: result.upstream.fetch("errors", 0), hung: result.requests.count { |_, s, _| s == 504 },
        latency: PHASES.to_h { |p| [p, latency(main[p])] },
        page: PHASES.to_h { |p| [p, latency(page[p])&.last] },
        page_p99: PHASES.filter_map { |p| latency(page[p])&.last }.max,
        slow_ok: slow.count { |_, s, _| s == 200 },
        recovery: recovery(after, recovered_at, recovered_at + lengths.last),
        rejected_after: after.count { |_, s, _| s == 503 },
        lost: result.requests.count { |_, s, _| s.zero? }, page_lost: result.page.count { |_, s, _| s != 200 } }
    end

    def per_phase(requests, starts)
      requests.group_by { |t, _, _| PHASES[starts.rindex { |s| t >= s }] }
    end

    # [p50, p99] in ms, or nil without requests.
    def latency(requests)
      ms = (requests || []).map { |_, _, l| l * 1000 }.sort
      ms.empty? ? nil : [percentile(ms, 0.5), percentile(ms, 0.99)]
    end

    def percentile(sorted, q)
      sorted[[(q * sorted.size).ceil - 1, 0].max]
    end

    # Seconds from `from` to the end of the last 1 s window (in steps of
    # 0.1 s) under 95 % success; nil when the run ended under it.
    def recovery(requests, from, to)
      last_bad = nil
      start = from
      while start + 1 <= to + 1e-9
        window = requests.select { |t, _, _| t >= start && t < start + 1 }
        ok = window.count { |_, s, _| s == 200 }
        last_bad = start if window.empty? || ok < 0.95 * window.size
        start += 0.1
      end
      return 0.0 if last_bad.nil?
      return nil if last_bad + 1 > to - 1

      last_bad + 1 - from
    end

    def row(result)
      f = figures(result)
      latencies = PHASES.map { |p| f[:latency][p]&.map(&:round)&.join("/") || "—" }.join(", ")
      "#{result.setup}: #{result.description}: #{f[:failing]} failing calls reached the upstream, " \
        "#{f[:hung]} waited for the timeout, recovery #{fmt_recovery(f[:recovery], result.lengths.last)}, " \
        "#{f[:rejected_after]} 503s after recovery, #{f[:slow_ok]} of the slow phase's requests answered 200; " \
        "p50/p99 ms #{latencies}; unrelated page p99 ms #{page_cells(f[:page])}" \
        "#{", #{f[:lost]} unanswered" if f[:lost].positive?}" \
        "#{", #{f[:page_lost]} pages not served" if f[:page_lost].positive?}; load average #{result.load}"
    end

    def page_cells(page)
      PHASES.map { |p| page[p] ? page[p].round.to_s : "—" }.join(" / ")
    end

    def fmt_recovery(seconds, length)
      seconds ? format("%.1f s", seconds) : "> #{(length - 1).round} s"
    end

    # The median figures of each setup's runs, in the order they ran.
    def medians(results)
      results.group_by(&:setup).transform_values do |runs|
        all = runs.map { |r| figures(r) }
        median = ->(values) { values.sort_by { |v| v || Float::INFINITY }[(values.size - 1) / 2] }
        numbers = %i[failing hung page_p99 slow_ok recovery rejected_after].to_h { |k| [k, median.call(all.map { |f| f[k] })] }
        numbers.merge(page: PHASES.to_h { |p| [p, median.call(all.map { |f| f[:page][p] })] },
                      runs: runs.size, length: runs.first.lengths.last, description: runs.first.description)
      end
    end

    def table(results)
      header = ["setup", "failing calls reaching the upstream", "waited for the timeout",
                "unrelated page p99 ms: #{PHASES.map { |p| HEADINGS[p] }.join(' / ')}", "healthy → 95 %",
                "503s after recovery", "slow phase: 200s"]
      rows = medians(results).map do |setup, m|
        [setup, m[:failing], m[:hung], page_cells(m[:page]), fmt_recovery(m[:recovery], m[:length]),
         m[:rejected_after], m[:slow_ok]]
      end
      runs = results.group_by(&:setup).transform_values(&:size).values.uniq
      lines = ([header, header.map { "---" }] + rows).map { |cells| "| #{cells.join(' | ')} |" }
      legend = medians(results).map { |setup, m| "#{setup}: #{m[:description]}" }
      ["Median of #{runs.join('/')} run(s) per setup.", *lines, "", *legend].join("\n")
    end

    # Whether a peer's setup beats this gem's defaults (host scope) on
    # every judged column at once, and how the recommended settings with a
    # cap compare with each peer on failing calls, waiting calls and the
    # unrelated page's p99.
    def verdict(results)
      m = medians(results)
      peers = m.keys & PEERS
      return "" if peers.empty?

      [(defaults_verdict(m, peers) if m["host"]), (cap_verdict(m, peers) if m["recommended-cap"])].compact.join("\n")
    end

    def defaults_verdict(m, peers)
      host = m["host"]
      dominating = peers.select { |peer| JUDGED.keys.all? { |k| score(m[peer][k]) < score(host[k]) } }
      lines = [if dominating.empty?
                 "host (the defaults): no peer is better on every column at once"
               else
                 "host (the defaults): DOMINATED by #{dominating.join(', ')} (better on every column)"
               end]
      JUDGED.each do |k, label|
        better = peers.select { |peer| score(m[peer][k]) < score(host[k]) }
        lines << "  #{label}: host #{fmt(host[k], k)}; better: #{listing(m, better, k)}"
      end
      lines
    end

    def cap_verdict(m, peers)
      cap = m["recommended-cap"]
      lines = %i[failing hung page_p99].map do |k|
        not_beaten = peers.reject { |peer| score(cap[k]) < score(m[peer][k]) }
        "recommended-cap, #{JUDGED[k]} #{fmt(cap[k], k)}: " +
          (not_beaten.empty? ? "better than every peer" : "not better than #{listing(m, not_beaten, k)}")
      end
      slow, healthy = cap[:page].values_at("slow", "healthy")
      if slow && healthy
        lines << format("recommended-cap, unrelated page p99: %d ms slow, %d ms healthy (%.1f×, bound 2×)",
                        slow, healthy, slow / healthy)
      end
      lines
    end

    def listing(medians, setups, key)
      setups.empty? ? "none" : setups.map { |s| "#{s} #{fmt(medians[s][key], key)}" }.join(", ")
    end

    def score(value)
      value || Float::INFINITY
    end

    def fmt(value, key = nil)
      case value
      when nil then "never"
      when Float then key == :page_p99 ? "#{value.round} ms" : "#{value.round(1)} s"
      else value.to_s
      end
    end
  end
end
