# frozen_string_literal: true

require "circuit_breaker"
require "circuit_breaker/text"

class CircuitBreaker
  # The Prometheus text exposition format (version 0.0.4) of breakers, by
  # Prometheus's naming conventions: `_total` counters, a state gauge with
  # one series per state, ratios in 0..1 and times in seconds. Each breaker
  # is one `breaker` label; its metrics are read once (one {#metrics}
  # snapshot). docs/operating.md lists the series and how to scrape
  # multi-process servers.
  #
  # @example A Rack endpoint (CircuitBreaker::Dashboard serves this too)
  #   require "circuit_breaker/prometheus"
  #   get("/metrics") { [200, { "content-type" => CircuitBreaker::Prometheus::CONTENT_TYPE },
  #                      [CircuitBreaker::Prometheus.render]] }
  module Prometheus
    # The Content-Type of {render}'s text.
    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    STATES = %i[closed open half_open forced_open disabled].freeze
    FLEET = %i[connecting connected degraded].freeze

    # name, type, help, how to read the value from a metrics Hash (nil: no sample)
    FAMILIES = [
      ["circuit_breaker_calls_total", "counter",
       "Calls admitted since the breaker was created, whatever their outcome.", ->(m) { m[:calls] }],
      ["circuit_breaker_successes_total", "counter",
       "Calls recorded as successes since the breaker was created.", ->(m) { m[:successes] }],
      ["circuit_breaker_failures_total", "counter",
       "Calls recorded as failures since the breaker was created.", ->(m) { m[:failures_total] }],
      ["circuit_breaker_slow_calls_total", "counter",
       "Calls at least as long as the slow-call threshold since the breaker was created.", ->(m) { m[:slow_total] }],
      ["circuit_breaker_rejected_calls_total", "counter",
       "Calls rejected without running since the breaker was created.", ->(m) { m[:rejected] }],
      ["circuit_breaker_opened_total", "counter",
       "Times the breaker entered the open state since it was created.", ->(m) { m[:opened] }],
      ["circuit_breaker_limited_calls_total", "counter",
       "Calls refused at the max_concurrent cap since the breaker was created (also in rejected_calls_total).",
       ->(m) { m[:limited] }],
      ["circuit_breaker_in_flight_calls", "gauge",
       "With max_concurrent: calls in flight now (host-wide for a host-wide breaker); absent without a cap.",
       ->(m) { m[:in_flight] }],
      ["circuit_breaker_concurrency_limit", "gauge",
       "With max_concurrent: the cap on calls in flight (the fixed one, or the adaptive one now); absent without a cap.",
       ->(m) { m[:concurrency_limit] }],
      ["circuit_breaker_window_calls", "gauge",
       "Calls in the breaker's window now.", ->(m) { m[:total] }],
      ["circuit_breaker_error_ratio", "gauge",
       "Share of failures in the breaker's window now (0 when empty).", ->(m) { m[:error_rate] }],
      ["circuit_breaker_slow_call_ratio", "gauge",
       "Share of slow calls in the breaker's window now (0 when empty).", ->(m) { m[:slow_call_rate] }],
      ["circuit_breaker_tripped_error_ratio", "gauge",
       "While open or half-open: the error ratio that opened the breaker.", ->(m) { m[:tripped_error_rate] }],
      ["circuit_breaker_tripped_slow_call_ratio", "gauge",
       "While open or half-open: the slow-call ratio that opened the breaker.", ->(m) { m[:tripped_slow_call_rate] }],
      ["circuit_breaker_admit_ratio", "gauge",
       "Share of calls the breaker admits now (1 closed or disabled, 0 open, the ramp stage's share half-open).",
       ->(m) { m[:admit_share] }],
      ["circuit_breaker_retry_after_seconds", "gauge",
       "Seconds until an open breaker admits probes (0 unless open; absent when forced open).",
       ->(m) { m[:retry_after] }],
      ["circuit_breaker_half_open_stage", "gauge",
       "The half-open ramp stage (from 0); absent in other states.", ->(m) { m[:stage] }]
    ].freeze

    LABEL_NAME = /\A[a-zA-Z_][a-zA-Z0-9_]*\z/
    RESERVED = %w[breaker state counters status].freeze
    private_constant :STATES, :FLEET, :FAMILIES, :LABEL_NAME, :RESERVED

    class << self
      # The exposition of `breakers`.
      #
      # @example Every registered breaker, with a label naming the Puma worker
      #   CircuitBreaker::Prometheus.render(labels: { worker: worker_index })
      # @param breakers [Hash{String => CircuitBreaker}] name => breaker
      #   (default: {CircuitBreaker.registry}); the name becomes the
      #   `breaker` label
      # @param labels [Hash] constant labels added to every sample (names as
      #   Prometheus allows, other than breaker, state, counters and status)
      # @return [String] the text, ending with a newline (empty without breakers)
      # @raise [TypeError] breakers not a Hash of names to breakers, or labels not a Hash
      # @raise [ArgumentError] a label name Prometheus refuses or reserved here
      def render(breakers = CircuitBreaker.registry, labels: {})
        base = constant_labels(labels)
        rows = snapshots(breakers).map { |name, m| [{ "breaker" => name }.merge(base), m] }
        out = +""
        family(out, "circuit_breaker_state", "gauge",
               "1 for the state the breaker is in, 0 for the others.") do
          rows.flat_map { |l, m| STATES.map { |s| [l.merge("state" => s.to_s), m[:state] == s ? 1 : 0] } }
        end
        family(out, "circuit_breaker_info", "gauge",
               "Always 1; counters=\"host\" when the counters are those of every process of the host (shared:).") do
          rows.map { |l, m| [l.merge("counters" => m[:counters].to_s), 1] }
        end
        family(out, "circuit_breaker_fleet_status", "gauge",
               "With fleet: 1 for the status of the breaker's link to Redis (connecting, connected, degraded), " \
               "0 for the others; absent without fleet.") do
          rows.select { |_, m| m[:fleet] }.flat_map do |l, m|
            FLEET.map { |s| [l.merge("status" => s.to_s), m[:fleet] == s ? 1 : 0] }
          end
        end
        FAMILIES.each do |name, type, help, read|
          family(out, name, type, help) { rows.map { |l, m| [l, read.call(m)] } }
        end
        out
      end

      private

      def snapshots(breakers)
        raise TypeError, "breakers must be a Hash of name => CircuitBreaker (got #{breakers.class})" unless breakers.is_a?(Hash)

        breakers.map do |name, breaker|
          unless (name.is_a?(String) || name.is_a?(Symbol)) && breaker.is_a?(CircuitBreaker)
            raise TypeError, "breakers must be a Hash of name => CircuitBreaker (got #{name.inspect} => #{breaker.class})"
          end

          [Text.utf8(name), breaker.metrics]
        end
      end

      def constant_labels(labels)
        raise TypeError, "labels must be a Hash (got #{labels.class})" unless labels.is_a?(Hash)

        labels.to_h do |k, v|
          k = k.to_s
          unless LABEL_NAME.match?(k) && !k.start_with?("__") && !RESERVED.include?(k)
            raise ArgumentError, "labels: #{k.inspect} is not a label name Prometheus allows here " \
                                 "([a-zA-Z_][a-zA-Z0-9_]*, no leading __, not #{RESERVED.join('/')})"
          end

          [k, Text.utf8(v.to_s)]
        end
      end

      # Appends one family: its HELP, its TYPE and a sample for each
      # [labels, value] the block gives with a value.
      def family(out, name, type, help)
        samples = yield.reject { |_, v| v.nil? }
        return if samples.empty?

        out << "# HELP " << name << " " << help << "\n"
        out << "# TYPE " << name << " " << type << "\n"
        samples.each do |labels, value|
          out << name << "{" << labels.map { |k, v| "#{k}=\"#{escape(v)}\"" }.join(",") << "} " << number(value) << "\n"
        end
      end

      def escape(value)
        value.gsub(/[\\"\n]/, "\\" => "\\\\", "\"" => "\\\"", "\n" => "\\n")
      end

      def number(value)
        return value.to_s if value.is_a?(Integer)
        return value.positive? ? "+Inf" : "-Inf" if value.infinite?

        value.nan? ? "NaN" : value.to_s
      end
    end
  end
end
