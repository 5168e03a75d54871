#!/usr/bin/env ruby
# frozen_string_literal: true

# One breaker for every forked worker, the way a Puma cluster or Unicorn
# uses it: the master creates a `shared:` breaker before it forks, and each
# worker inherits it (the same memory-mapped file). When the dependency goes
# down, the workers trip it together: about min_calls calls reach the
# dependency in all, not min_calls per worker, and exactly one worker (the
# one whose call tripped it) sees the closed -> open event.
#
#   ruby examples/puma_style.rb             # 4 workers
#   WORKERS=8 ruby examples/puma_style.rb
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "circuit_breaker"

WORKERS = Integer(ENV.fetch("WORKERS", "4"))
CALLS = 25 # calls per worker during the outage
MIN_CALLS = 10
OPEN_DURATION = 0.5
KEY = "puma-style-#{Process.pid}" # a name of this run; a real app uses e.g. "payments"

# The payments API (5 ms a call): down during the outage, back afterwards.
class PaymentsAPI
  attr_reader :calls

  def initialize
    @calls = 0
    @down = true
  end

  def recover!
    @down = false
  end

  def charge
    @calls += 1
    sleep 0.005 # a round trip
    raise Errno::ECONNREFUSED, "payments.internal:443" if @down

    :charged
  end
end

# What a worker sends back to the master: its pid, the calls that reached
# the dependency, the calls the breaker rejected, and the transitions its
# own listener saw.
Report = Struct.new(:worker, :pid, :reached, :rejected, :events)

# --- the master -------------------------------------------------------------
breaker = CircuitBreaker.new(
  shared: KEY, name: "payments",
  window: CircuitBreaker::SlidingWindow.new(size: 50),
  min_calls: MIN_CALLS, open_duration: OPEN_DURATION, half_open_calls: 2
)
events = [] # each process fills its own copy (fork copies the listener too)
breaker.on_state_change { |e| events << "#{e.from} -> #{e.to} (#{e.reason})" }

puts "master #{Process.pid}: breaker #{breaker.name.inspect} shared in #{breaker.shared_path}"
puts "  min_calls #{MIN_CALLS}, open_duration #{OPEN_DURATION}s, #{WORKERS} workers x #{CALLS} calls"

# Two gates: a worker waits on a pipe until the master closes its end, so
# every worker starts a phase at once.
outage_gate = IO.pipe
recovery_gate = IO.pipe
def wait_gate(gate)
  IO.select([gate[0]], nil, nil, 30) or abort("gate not opened")
  gate[0].read(1)
end

workers = Array.new(WORKERS) do |i|
  reader, writer = IO.pipe
  pid = fork do
    # --- a worker ---------------------------------------------------------
    reader.close
    [outage_gate, recovery_gate].each { |g| g[1].close }
    api = PaymentsAPI.new
    report = lambda do |reached, rejected|
      data = Marshal.dump(Report.new(i, Process.pid, reached, rejected, events.dup))
      writer.write([data.bytesize].pack("N"), data)
    end
    run = lambda do |n, pause|
      rejected = 0
      before = api.calls
      n.times do
        breaker.call { api.charge }
      rescue CircuitBreaker::OpenError
        rejected += 1 # serve a fallback here
      rescue Errno::ECONNREFUSED
        nil
      ensure
        sleep pause
      end
      [api.calls - before, rejected]
    end

    wait_gate(outage_gate)
    report.(*run.(CALLS, 0))
    events.clear
    wait_gate(recovery_gate)
    api.recover!
    report.(*run.(10, 0.01))
    exit!(0)
  end
  writer.close
  [pid, reader]
end

def read_report(reader)
  IO.select([reader], nil, nil, 30) or abort("a worker did not report within 30 s")
  length = reader.read(4)&.unpack1("N") or abort("a worker exited without reporting")
  Marshal.load(reader.read(length)) # rubocop:disable Security/MarshalLoad
end

def show(reports)
  reports.each do |r|
    seen = r.events.empty? ? "" : "; its listener saw #{r.events.join(', ')}"
    puts format("  worker %d (pid %d): %2d calls reached the dependency, %2d rejected%s",
                r.worker, r.pid, r.reached, r.rejected, seen)
  end
end

puts "\n-- outage: the payments API refuses connections; every worker calls it #{CALLS} times at once"
outage_gate[1].close
reports = workers.map { |_, reader| read_report(reader) }
show(reports)
reached = reports.sum(&:reached)
openers = reports.reject { |r| r.events.empty? }.map(&:worker)
puts "  => #{reached} calls reached the dependency in all: min_calls (#{MIN_CALLS}) and the calls in flight " \
     "when it tripped;\n     with a breaker per worker it would be at least #{WORKERS * MIN_CALLS}"
puts "  => one closed -> open event for all workers, seen by worker #{openers.join(', ')} (the one that tripped it)"
puts "  => master: state #{breaker.state}, #{breaker.metrics[:rejected]} calls rejected in all, " \
     "its own listener saw #{events.empty? ? 'nothing' : events.join(', ')}"

puts "\n-- recovery: the API is back; after open_duration (#{OPEN_DURATION}s) every worker calls it 10 times"
sleep OPEN_DURATION
recovery_gate[1].close
reports = workers.map { |_, reader| read_report(reader) }
show(reports)
puts "  => master: state #{breaker.state}"

workers.each { |pid, _| Process.wait(pid) }
# The file goes once no process maps it (removed by the next shared breaker opened on this host).
