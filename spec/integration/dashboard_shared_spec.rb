# frozen_string_literal: true

require "io/wait"
require "rack/mock"
require "circuit_breaker/dashboard"

# An action taken on the status page of one worker reaches every worker of
# the host when the breaker is `shared:` (they map one record): real forked
# workers, each with its own breaker object.
RSpec.describe CircuitBreaker::Dashboard, "with shared: breakers in forked workers", :integration, :shared_memory do
  let(:key) { "spec-dashboard-#{Process.pid}-#{rand(1 << 32)}" }
  let(:options) { { min_calls: 5, open_duration: 600, shared: key } }

  # A worker process: answers each line read with its breaker's state.
  def start_worker
    to_child_r, to_child = IO.pipe
    from_child, from_child_w = IO.pipe
    pid = ChildProcess.fork("worker") do
      # The other workers' pipes too: an inherited end would hold them open.
      [to_child, from_child, *@parent_ends].each(&:close)
      breaker = CircuitBreaker.new(**options)
      from_child_w.puts "ready"
      from_child_w.flush
      while to_child_r.gets
        from_child_w.puts breaker.state
        from_child_w.flush
      end
      exit!(0)
    end
    to_child_r.close
    from_child_w.close
    (@parent_ends ||= []).push(to_child, from_child)
    expect(ChildProcess.gets(from_child, within: 60)).to eq("ready\n")
    [pid, to_child, from_child]
  end

  def state_of(worker)
    _, to_child, from_child = worker
    to_child.puts "state?"
    to_child.flush
    raise "the worker did not answer within 60 s" unless from_child.wait_readable(60)

    from_child.gets.chomp.to_sym
  end

  it "trips, forces open, disables and resets the breaker of every worker" do
    breaker = CircuitBreaker.new(**options)
    workers = Array.new(2) { start_worker }
    app = described_class.new(authorize: ->(_req) { true }, breakers: { "payments" => breaker })
    browser = Rack::MockRequest.new(app)
    page = browser.get("/")
    cookie = page.headers["set-cookie"][/\Acircuit_breaker_csrf=\h+/]
    token = page.body[/name="csrf_token" value="(\h+)"/, 1]

    expect(workers.map { |w| state_of(w) }).to eq(%i[closed closed])
    { "trip" => :open, "force_open" => :forced_open, "disable" => :disabled, "reset" => :closed }.each do |action, state|
      response = browser.post("/breakers/payments/#{action}", "HTTP_COOKIE" => cookie, params: { csrf_token: token })
      expect(response.status).to eq(303)
      expect(workers.map { |w| state_of(w) }).to eq([state, state]), "after #{action}"
    end
  ensure
    (@parent_ends || []).each(&:close)
    # Our own children, ended whatever state the example left them in.
    workers&.each { |pid, _, _| ChildProcess.stop(pid, signal: :KILL) }
  end
end
