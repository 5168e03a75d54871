# frozen_string_literal: true

require "rbconfig"
begin
  require "circuit_breaker/sidekiq"
  require "sidekiq/api"
rescue LoadError => e
  # bin/test installs Sidekiq (spec/support/debian_packages.rb); Sidekiq 8
  # needs json 2.16 or newer, which ruby-json has.
  reason = DebianPackages.load_error_reason(e, "ruby-sidekiq", "ruby-json")
  RSpec.describe "CircuitBreaker::Adapters::Sidekiq" do
    it("defers jobs in a real Sidekiq process") { skip reason }
  end
  return
end

# The Sidekiq middleware with a real redis-server: in this process with a
# ManualClock (deferral times exactly), and in a real Sidekiq process
# (spec/fixtures/sidekiq_app.rb).
RSpec.describe CircuitBreaker::Adapters::Sidekiq::Middleware, :redis do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:middleware) { described_class.new(jitter: 0.2) }

  before do
    Sidekiq.logger.level = Logger::WARN # the deferral lines
    Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=) # Sidekiq 6.4 on redis-rb 4.8
    url = redis_server.url
    Sidekiq.configure_client { |config| config.redis = { url: url } }
    redis_server.command("FLUSHALL")
  end

  after { CircuitBreaker.forget_all! }

  def job(**extra)
    { "class" => "ChargeJob", "jid" => "abc123", "args" => [1], "queue" => "default", "retry" => 5,
      "circuit_breaker" => "payments", **extra.transform_keys(&:to_s) }
  end

  # Runs the middleware; returns whether the job ran.
  def run(payload)
    ran = false
    middleware.call(Object.new, payload, "default") { ran = true }
    ran
  end

  def scheduled
    Sidekiq::ScheduledSet.new.to_a
  end

  it "runs jobs that name no breaker, and jobs whose breaker is closed" do
    CircuitBreaker.for("payments", clock: clock)

    expect(run(job.except("circuit_breaker"))).to be(true)
    expect(run(job)).to be(true)
    expect(scheduled).to be_empty
  end

  it "defers a job whose breaker is open to retry_after (with jitter), without running it or spending a retry" do
    CircuitBreaker.for("payments", clock: clock, open_duration: 60).trip!
    clock.advance(20)
    now = Time.now.to_f

    expect(run(job(retry_count: 2))).to be(false)

    entry = scheduled.first
    expect(scheduled.size).to eq(1)
    expect(entry.item).to include("jid" => "abc123", "args" => [1], "retry_count" => 2, "circuit_breaker_deferrals" => 1)
    expect(entry.at.to_f).to be_between(now + 40, Time.now.to_f + (40 * 1.2))
  end

  it "defers by open_duration while forced open" do
    CircuitBreaker.for("payments", clock: clock, open_duration: 30).force_open!
    now = Time.now.to_f

    expect(run(job)).to be(false)
    expect(scheduled.first.at.to_f).to be_between(now + 30, Time.now.to_f + (30 * 1.2))
  end

  it "spreads deferred jobs over the jitter" do
    CircuitBreaker.for("payments", clock: clock, open_duration: 100).trip!

    20.times { |i| run(job(jid: "j#{i}")) }

    ats = scheduled.map(&:at).map(&:to_f)
    expect(ats.max - ats.min).to be > 1 # 20 draws over a 20 s spread
  end

  it "lets a job run while half-open, reading the state without taking a probe permit" do
    breaker = CircuitBreaker.for("payments", clock: clock, open_duration: 10, half_open_calls: 1)
    breaker.trip!
    clock.advance(10)

    probed = nil
    middleware.call(Object.new, job, "default") { probed = breaker.call { :probe } }

    expect(probed).to eq(:probe)
    expect(breaker.state).to eq(:closed)
  end

  it "runs a job after 10 deferrals, whatever the breaker says" do
    CircuitBreaker.for("payments", clock: clock).force_open!

    expect(run(job(circuit_breaker_deferrals: 9))).to be(false)
    expect(scheduled.first.item["circuit_breaker_deferrals"]).to eq(10)
    expect(run(scheduled.first.item)).to be(true)
  end

  describe "a job refused at its breaker's concurrency cap (docs/adapters.md)" do
    # Runs the job inside a call that holds the cap's only slot, so the
    # job's own call through the breaker is refused; returns whether that
    # call ran.
    def run_at_full_cap(breaker, payload)
      ran = false
      breaker.call { middleware.call(Object.new, payload, "default") { breaker.call { ran = true } } }
      ran
    end

    def refusal(name, retry_after: 1.0)
      CircuitBreaker::ConcurrencyLimitError.new(breaker_name: name, limit: 1, retry_after: retry_after)
    end

    it "is deferred by retry_after (1 s, with jitter), without spending a retry" do
      breaker = CircuitBreaker.for("payments", clock: clock, max_concurrent: 1)
      now = Time.now.to_f

      expect(run_at_full_cap(breaker, job(retry_count: 2))).to be(false)

      expect(scheduled.size).to eq(1)
      entry = scheduled.first
      expect(entry.item).to include("jid" => "abc123", "args" => [1], "retry_count" => 2, "circuit_breaker_deferrals" => 1)
      expect(entry.at.to_f).to be_between(now + 1.0, Time.now.to_f + 1.2)
      expect(breaker.metrics).to include(limited: 1, in_flight: 0, total: 1) # the holding call only
    end

    it "fails as Sidekiq sees it after max_deferrals, so a cap that stays full cannot defer it for ever" do
      breaker = CircuitBreaker.for("payments", clock: clock, max_concurrent: 1)

      expect { run_at_full_cap(breaker, job(circuit_breaker_deferrals: 10)) }
        .to raise_error(CircuitBreaker::ConcurrencyLimitError)
      expect(scheduled).to be_empty
    end

    it "never comes back sooner than 1 s, whatever the error's retry_after says" do
      CircuitBreaker.for("payments", clock: clock)
      now = Time.now.to_f

      [0.0, -1.0, Float::NAN, nil].each do |short|
        middleware.call(Object.new, job(jid: "j#{short.inspect}"), "default") { raise refusal("payments", retry_after: short) }
      end

      expect(scheduled.map { |entry| entry.at.to_f }).to all(be >= now + 1.0)
      expect(scheduled.size).to eq(4)
    end

    it "is deferred when an adapter's rejection carries the refusal (an adapter's own breaker, named by the job)" do
      require "circuit_breaker/net_http"
      CircuitBreaker.for("net_http:127.0.0.1:9", clock: clock)
      rejection = CircuitBreaker::Adapters::NetHTTP::OpenError.new(refusal("net_http:127.0.0.1:9"))

      expect(middleware.call(Object.new, job(circuit_breaker: "net_http:127.0.0.1:9"), "default") { raise rejection }).to be_nil
      expect(scheduled.map { |entry| entry.item["circuit_breaker_deferrals"] }).to eq([1])
    end

    it "fails as Sidekiq sees it when the refusal is another breaker's, or another rejection" do
      CircuitBreaker.for("payments", clock: clock)

      expect { middleware.call(Object.new, job, "default") { raise refusal("search") } }
        .to raise_error(CircuitBreaker::ConcurrencyLimitError)
      open_error = CircuitBreaker::OpenError.new(breaker_name: "payments", state: :open, retry_after: 5.0)
      expect { middleware.call(Object.new, job, "default") { raise open_error } }
        .to raise_error(CircuitBreaker::OpenError) { |error| expect(error).to be(open_error) }
      expect(scheduled).to be_empty
    end
  end

  it "refuses a breaker nobody registered, and bad options, naming them" do
    expect { run(job) }.to raise_error(ArgumentError, /no breaker is registered as "payments"/)
    expect { described_class.new(max_deferrals: -1) }.to raise_error(ArgumentError, /max_deferrals .* 0\.\.1_000/)
    expect { described_class.new(jitter: 2) }.to raise_error(ArgumentError, /jitter .* 0\.0\.\.1\.0/)
    expect { described_class.new(retries: 1) }.to raise_error(ArgumentError, /unknown option\(s\) retries/)
  end

  it "defers in a real Sidekiq process: the open breaker's job and the one refused at its cap wait, the others run" do
    lib = File.expand_path("../../lib", __dir__)
    app = File.expand_path("../fixtures/sidekiq_app.rb", __dir__)
    sidekiq = Gem.bin_path("sidekiq", "sidekiq") rescue "sidekiq" # rubocop:disable Style/RescueModifier
    %w[up down].each { |name| Sidekiq::Client.push("class" => "RecordingJob", "args" => [name], "circuit_breaker" => name) }
    Sidekiq::Client.push("class" => "RecordingJob", "args" => ["down-10"], "circuit_breaker" => "down",
                         "circuit_breaker_deferrals" => 10)
    Sidekiq::Client.push("class" => "AtTheCapJob", "args" => ["capped"], "circuit_breaker" => "capped")
    started = Time.now.to_f
    pid = ChildProcess.spawn({ "REDIS_URL" => redis_server.url, "RUBYLIB" => lib, "RACK_ENV" => "test" },
                             RbConfig.ruby, sidekiq, "-r", app, "-c", "1", "-t", "1",
                             out: File::NULL, err: File::NULL)
    begin
      redis_server.wait_until("Sidekiq ran two jobs and deferred two") do
        redis_server.command("LLEN", "ran") == 2 && redis_server.command("ZCARD", "schedule") == 2
      end
    ensure
      ChildProcess.stop(pid, grace: 30) # TERM: Sidekiq's shutdown (-t 1), KILL if it hangs
    end

    expect(redis_server.command("LRANGE", "ran", 0, -1)).to contain_exactly("up", "down-10")
    deferred = scheduled.to_h { |entry| [entry.item["args"].first, entry] }
    expect(deferred.keys).to contain_exactly("down", "capped")
    expect(deferred["down"].item).to include("circuit_breaker_deferrals" => 1)
    expect(deferred["down"].item).not_to have_key("retry_count")
    expect(deferred["down"].at.to_f).to be_between(Time.now.to_f + 50, Time.now.to_f + (60 * 1.2))
    # Refused at the cap inside the job: deferred by 1 s, no retry spent
    # (again if the poller, 10 s or more after the start, brought it back).
    expect(deferred["capped"].item["circuit_breaker_deferrals"]).to be >= 1
    expect(deferred["capped"].item).not_to have_key("retry_count")
    expect(deferred["capped"].at.to_f).to be_between(started + 1.0, Time.now.to_f + 1.2)
  end
end
