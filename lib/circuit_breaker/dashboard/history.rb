# frozen_string_literal: true

class CircuitBreaker
  class Dashboard
    # The states each breaker was seen in by this process, for the page's
    # chart and the JSON's `history`: a change is kept while it is within
    # `seconds` of now (and the newest one older than that, which says what
    # the state was at the chart's left edge), at most 500 per breaker.
    # @api private
    class History
      # @return [Numeric] how far back the chart reaches
      attr_reader :seconds

      def initialize(seconds)
        @seconds = seconds
        @changes = {}
        @lock = Mutex.new
      end

      # Notes `state` as seen at `now` (monotonic seconds).
      def sample(name, state, now)
        @lock.synchronize do
          list = (@changes[name] ||= [])
          list << [now, state] unless list.last&.last == state
          # Keep the newest change older than the chart's start: it says what
          # the state was at the left edge.
          list.shift while list.size > 1 && list[1].first <= now - @seconds
          list.shift while list.size > 500
        end
      end

      # @return [Float] the clock samples are taken by (monotonic seconds)
      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end

      # [{ state:, seconds_ago: }] of the state changes the app saw, oldest first.
      def of(name)
        now = self.now
        (@lock.synchronize { @changes[name]&.dup } || []).map { |t, s| { state: s, seconds_ago: (now - t).round(3) } }
      end
    end
  end
end
