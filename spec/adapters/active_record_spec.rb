# frozen_string_literal: true

begin
  require "circuit_breaker/active_record"
  require "pg"
  # mysql2 is required by its context, just before it is used (see there).
  gem "mysql2" if defined?(Gem)
rescue LoadError => e # Gem::LoadError too
  # bin/test installs ActiveRecord, pg and mysql2 (spec/support/debian_packages.rb).
  reason = DebianPackages.load_error_reason(e, "ruby-activerecord", "ruby-pg", "ruby-mysql2")
  RSpec.describe "CircuitBreaker::Adapters::ActiveRecord" do
    it("runs against PostgreSQL and MariaDB") { skip reason }
  end
  return
end

# Abstract models, one per database, so the specs never touch
# ActiveRecord::Base's own connection.
class AdapterSpecPostgres < ActiveRecord::Base
  self.abstract_class = true
end

class AdapterSpecMariaDB < ActiveRecord::Base
  self.abstract_class = true
end

# The ActiveRecord adapter against real servers: PostgreSQL and MariaDB
# (spec/support/db_servers.rb), killed (refused), with a connection
# terminated by the server, a statement timing out, a role over its
# connection limit, and bad SQL.
RSpec.describe CircuitBreaker::Adapters::ActiveRecord do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:options) { { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 3, open_duration: 10, clock: clock } }

  # Other files may leave breakers registered: each example starts with none.
  before { CircuitBreaker.forget_all! }

  after do
    model.remove_connection
    described_class.clear!
    CircuitBreaker.forget_all!
    server.launch unless server.up?
  end

  # A connection that has connected (ActiveRecord 7.1 on connects at the
  # first query).
  def connect(**extra)
    model.establish_connection(server.config(circuit_breaker: options, **extra))
    model.connection.tap { |c| c.select_value("SELECT 1") }
  end

  def breaker
    CircuitBreaker.registry.fetch("active_record:127.0.0.1:#{server.port}/#{database}")
  end

  def counts
    breaker.metrics.slice(:total, :failures)
  end

  # Queries that reach the database (ActiveRecord instruments each).
  def queries_sent
    sent = 0
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") { sent += 1 }
    yield
    sent
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  shared_examples "a protected database" do
    it "leaves databases without the setting alone" do
      model.establish_connection(server.config)
      model.connection.select_value("SELECT 1")

      expect(CircuitBreaker.registry).to be_empty
    end

    it "records bad SQL as a success and raises it as ActiveRecord does" do
      c = connect
      before = counts[:total]

      expect { c.execute("SELEC 1") }.to raise_error(ActiveRecord::StatementInvalid)
      expect(counts).to eq(total: before + 1, failures: 0)
    end

    it "records a statement timeout as a failure" do
      c = connect
      before = counts[:failures]

      expect { c.execute(slow_statement) }.to raise_error(ActiveRecord::StatementInvalid)
      expect(counts[:failures]).to eq(before + 1)
    end

    it "records a connection the server terminated as a failure" do
      c = connect
      terminate(c)
      before = counts[:failures]

      expect { c.select_value("SELECT 1") }.to raise_error(ActiveRecord::ActiveRecordError)
      expect(counts[:failures]).to eq(before + 1)
    end

    it "opens when the server is down, rejects without a query and without a retry, then probes and closes" do
      c = connect
      server.crash
      3.times { expect { c.select_value("SELECT 1") }.to raise_error(ActiveRecord::ActiveRecordError) }
      expect(breaker.state).to eq(:open)
      server.launch
      rejected = breaker.metrics[:rejected]

      error = nil
      sent = queries_sent { error = (c.select_value("SELECT 1") rescue $!) } # rubocop:disable Style/RescueModifier

      expect(sent).to eq(0)
      expect(breaker.metrics[:rejected]).to eq(rejected + 1) # asked once: nothing retried it
      expect(error).to be_a(described_class::OpenError).and be_a(ActiveRecord::ConnectionNotEstablished)
      expect(CircuitBreaker::OpenError === error).to be(true)
      expect(error.breaker_name).to eq(breaker.name)

      clock.advance(10)
      model.connection_pool.disconnect! # a fresh connection
      # Two probes: the connect and a query before ActiveRecord 7.1, two
      # queries (the first connecting) from 7.1.
      expect(Array.new(2) { model.connection.select_value("SELECT 1").to_i }).to eq([1, 1])
      expect(breaker.state).to eq(:closed)
    end
  end

  shared_examples "a database behind a concurrency cap" do
    it "passes max_concurrent: and max_wait: to the breaker it builds; over the cap, its rejection says :concurrency_limit" do
      model.establish_connection(server.config(circuit_breaker: { max_concurrent: 1, max_wait: 0.05, **options }))
      c = model.connection.tap { |conn| conn.select_value("SELECT 1") }
      expect(breaker.metrics).to include(concurrency_limit: 1, in_flight: 0)
      rejected = breaker.metrics[:rejected]

      # The only slot held around the query: it waits max_wait for one, then is refused, once.
      error = nil
      waited = nil
      sent = queries_sent do
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        error = breaker.call { c.select_value("SELECT 1") rescue $! } # rubocop:disable Style/RescueModifier
        waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      end

      expect(error).to be_a(described_class::OpenError).and be_a(ActiveRecord::ConnectionNotEstablished)
      expect(error).to have_attributes(reason: :concurrency_limit, limit: 1, breaker_name: breaker.name)
      expect(CircuitBreaker::ConcurrencyLimitError === error).to be(true)
      expect(waited).to be >= 0.05
      expect(sent).to eq(0)
      expect(breaker.metrics).to include(rejected: rejected + 1, limited: 1, in_flight: 0, failures: 0)
    end
  end

  shared_examples "a rejection ActiveRecord does not retry" do
    it "rejects a reconnect once: ActiveRecord's connection retries (7.1 on) leave it alone" do
      if ActiveRecord.gem_version < Gem::Version.new("7.1")
        skip "ActiveRecord #{ActiveRecord.version} retries no connection error (7.1 added retries); the query path above covers it"
      end
      c = connect
      breaker.trip!
      rejected = breaker.metrics[:rejected]

      expect { c.reconnect! }.to raise_error(described_class::OpenError)
      expect(breaker.metrics[:rejected]).to eq(rejected + 1)
    end
  end

  context "with PostgreSQL (pg)" do
    before(:all) do
      skip "PostgreSQL is not installed (bin/test installs it)" unless DbServers::Postgres.available?
      @server = DbServers::Postgres.start
      admin = PG.connect(host: "127.0.0.1", port: @server.port, user: "postgres", dbname: "postgres")
      admin.exec("CREATE ROLE crowded LOGIN CONNECTION LIMIT 0")
      admin.close
    end

    after(:all) { @server&.stop }

    let(:server) { @server }
    let(:model) { AdapterSpecPostgres }
    let(:database) { "postgres" }
    let(:slow_statement) { "SET statement_timeout = 20; SELECT pg_sleep(5)" }

    def terminate(connection)
      pid = connection.select_value("SELECT pg_backend_pid()")
      PG.connect(host: "127.0.0.1", port: server.port, user: "postgres", dbname: "postgres") do |admin|
        admin.exec("SELECT pg_terminate_backend(#{Integer(pid)})")
      end
    end

    include_examples "a protected database"
    include_examples "a database behind a concurrency cap"
    include_examples "a rejection ActiveRecord does not retry"

    it "records too many connections as a failure" do
      model.establish_connection(server.config(username: "crowded", circuit_breaker: options))

      expect { model.connection.select_value("SELECT 1") }
        .to raise_error(ActiveRecord::ConnectionNotEstablished, /too many connections/)
      expect(counts).to eq(total: 1, failures: 1)
    end
  end

  context "with MariaDB (mysql2)" do
    before(:all) do
      skip "MariaDB is not installed (bin/test installs it)" unless DbServers::MariaDB.available?
      # mysql2 0.5.3 (Debian 12) keeps Ruby objects in C globals that a
      # heap compaction moves (it crashed in _query after
      # spec/breaker/gc_spec.rb's GC.compact). Required here, and
      # run only in a process whose heap was never compacted: bin/test also
      # runs spec/adapters in a process of its own, where these run.
      if GC.stat(:compact_count).positive?
        skip "the heap was compacted in this process and mysql2 0.5.3 is not compaction-safe; " \
             "`rspec spec/adapters` (bin/test runs it) runs these"
      end
      require "mysql2"
      @server = DbServers::MariaDB.start
    end

    after(:all) { @server&.stop }

    let(:server) { @server }
    let(:model) { AdapterSpecMariaDB }
    let(:database) { "mysql" }
    let(:slow_statement) do
      "SET STATEMENT max_statement_time=0.02 FOR " \
        "SELECT COUNT(*) FROM information_schema.columns a, information_schema.columns b, information_schema.columns c"
    end

    def terminate(connection)
      id = connection.select_value("SELECT CONNECTION_ID()")
      admin = Mysql2::Client.new(host: "127.0.0.1", port: server.port, username: "root")
      admin.query("KILL #{Integer(id)}")
    ensure
      admin&.close
    end

    include_examples "a protected database"
    include_examples "a database behind a concurrency cap"
    include_examples "a rejection ActiveRecord does not retry"

    it "records too many connections as a failure" do
      admin = Mysql2::Client.new(host: "127.0.0.1", port: server.port, username: "root")
      admin.query("SET GLOBAL max_connections = 10") # MariaDB's least
      held = []
      refused = nil
      30.times do # 10 are taken, and one more for a privileged user
        held << Mysql2::Client.new(host: "127.0.0.1", port: server.port, username: "root")
      rescue Mysql2::Error => e
        refused = e
        break
      end
      expect(refused&.error_number).to eq(1040)

      model.establish_connection(server.config(circuit_breaker: options))
      expect { model.connection.select_value("SELECT 1") }
        .to raise_error(ActiveRecord::ConnectionNotEstablished, /Too many connections/)
      expect(counts).to eq(total: 1, failures: 1)
    ensure
      held&.each(&:close)
      admin&.query("SET GLOBAL max_connections = 20")
      admin&.close
    end
  end
end
