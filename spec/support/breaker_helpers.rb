# frozen_string_literal: true

# Helpers for the breaker's specs. Time moves only through a ManualClock;
# "slow" calls advance that clock inside their block.
module BreakerHelpers
  # The failure the helpers raise (a StandardError, so recorded by default).
  class Boom < StandardError; end

  # A thread that runs the jobs it is given, one at a time, and hands each
  # result back: lets a spec interleave two threads step by step, with no
  # sleep. Exceptions come back to the caller of `run`.
  class Actor
    def initialize
      @jobs = Queue.new
      @results = Queue.new
      @thread = Thread.new do
        while (job = @jobs.pop)
          @results << begin
            [:ok, job.call]
          rescue Exception => e # rubocop:disable Lint/RescueException
            [:error, e]
          end
        end
      end
    end

    def run(&job)
      @jobs << job
      tag, value = @results.pop
      raise value if tag == :error

      value
    end

    def stop
      @jobs << nil
      @thread.join
    end
  end

  # Yields a new {Actor} and stops it afterwards.
  def with_actor
    actor = Actor.new
    yield actor
  ensure
    actor&.stop
  end

  # A breaker on a ManualClock. `clock:` defaults to a fresh one (read it
  # back with `breaker_clock(breaker)` when the test did not keep it).
  def build_breaker(clock: CircuitBreaker::ManualClock.new, **options)
    breaker = CircuitBreaker.new(clock: clock, **options)
    (@breaker_clocks ||= {}.compare_by_identity)[breaker] = clock
    breaker
  end

  # The ManualClock a breaker was built with by {#build_breaker}.
  def breaker_clock(breaker)
    (@breaker_clocks || {}).fetch(breaker) do
      raise ArgumentError, "#{breaker.inspect} was not made by build_breaker: pass clock:"
    end
  end

  # Runs `n` calls that raise {Boom} (rescued); returns the breaker. An
  # OpenError (a rejected call) is not rescued.
  def fail_calls(breaker, n, ms: nil)
    n.times do
      breaker.call do
        breaker_clock(breaker).advance(ms / 1000.0) if ms
        raise Boom, "downstream failed"
      end
    rescue Boom
      nil
    end
    breaker
  end

  # Runs `n` calls that succeed; `ms:` makes each take that long on the
  # breaker's ManualClock. Returns the breaker.
  def succeed_calls(breaker, n, ms: nil)
    n.times do
      breaker.call do
        breaker_clock(breaker).advance(ms / 1000.0) if ms
        :ok
      end
    end
    breaker
  end

  # Fails calls until the breaker opens (at most `limit`); returns it.
  def trip!(breaker, limit: 10_000)
    limit.times do
      return breaker if breaker.state == :open

      fail_calls(breaker, 1)
    end
    raise "breaker did not open after #{limit} failed calls: #{breaker.inspect}"
  end

  # Advances the breaker's clock to the end of its open duration; the next
  # look at it sees half-open.
  def cool_down(breaker, clock: breaker_clock(breaker))
    clock.advance(breaker.retry_after)
    breaker
  end

  # Runs one call: its block's value, or :rejected when the breaker raised
  # OpenError without running it.
  def attempt(breaker, &block)
    block ||= -> { :ran }
    breaker.call(&block)
  rescue CircuitBreaker::OpenError
    :rejected
  end

  # Sends calls, one at a time, until every entry of `plan` has been used by
  # an admitted call: true succeeds, false raises {Boom}, :slow succeeds
  # after `slow_ms` on the breaker's clock. Returns the indexes (from 0) of
  # the calls that were admitted; rejected calls are skipped.
  def drive_probes(breaker, plan, slow_ms: 10_000, limit: 100_000, clock: nil)
    plan = plan.dup
    admitted = []
    limit.times do |n|
      return admitted if plan.empty?

      begin
        breaker.call do
          admitted << n
          step = plan.shift
          (clock || breaker_clock(breaker)).advance(slow_ms / 1000.0) if step == :slow
          raise Boom, "probe failed" unless step

          :ok
        end
      rescue CircuitBreaker::OpenError, Boom
        nil
      end
    end
    raise "plan not used up after #{limit} calls (#{plan.size} left): #{breaker.inspect}"
  end

  # Whether call n (from 0) of a half-open stage is admitted at `share`, by
  # the gem's spacing rule: when (n * share) mod 1 < share (exact decimals).
  def on_beat?(n, share)
    share = Rational(share.to_s)
    (n * share) % 1 < share
  end

  # Events of every transition from now on, in order.
  def transitions_of(breaker)
    events = []
    breaker.on_state_change { |e| events << e }
    events
  end

  # `[from, to, reason]` of each event.
  def moves(events)
    events.map { |e| [e.from, e.to, e.reason] }
  end
end

RSpec.configure do |config|
  config.include BreakerHelpers
end
