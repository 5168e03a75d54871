# frozen_string_literal: true

require "cgi"
require "json"
require "net/http"
require "socket"
require "tmpdir"
require "webrick"

# spec/fixtures/puma_app under a real Puma cluster (Debian's puma: 5.6 on
# Debian 12, 6 on Debian 13; 2 workers × 4 threads, preload_app!), set up
# as docs/rails.md documents it, through real HTTP on 127.0.0.1: what issue
# #25 saw fail with per-worker breakers holds with the default host scope.
# The page answers one state whichever worker answers, one POST acts on
# every worker, scraped counters never go down, and the page says which
# pid, host and scope answered.
RSpec.describe "a Puma cluster (spec/fixtures/puma_app)", :integration, :shared_memory do
  root = File.expand_path("../..", __dir__)
  app = File.join(root, "spec/fixtures/puma_app")
  password = "fixture-password"

  # The upstream of the app's breaker: /api/orders answers `status[0]`.
  def start_upstream(status)
    server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, DoNotReverseLookup: true, MaxClients: 64,
                                     Logger: WEBrick::Log.new(File::NULL, WEBrick::BasicLog::FATAL), AccessLog: [])
    server.mount_proc("/") do |_req, res|
      res.status = status[0]
      res["content-type"] = "application/json"
      res.body = status[0] == 200 ? %({"orders":[{"id":1}]}) : %({"error":"upstream"})
    end
    Thread.new { server.start }
    server
  end

  # Puma's master pid and the port it bound (its log's "Listening on" line).
  def start_puma(app, env, log)
    pid = ChildProcess.spawn(env, "puma", "-C", "config/puma.rb", chdir: app, out: log, err: %i[child out])
    deadline = monotonic + 60
    loop do
      port = File.read(log)[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1]
      return [pid, Integer(port)] if port
      raise "puma exited before listening:\n#{File.read(log)}" if ChildProcess.wait(pid, within: 0)
      raise "puma did not listen within 60 s:\n#{File.read(log)}" if monotonic > deadline

      sleep 0.05
    end
  rescue StandardError
    stop_puma(pid) if pid
    raise
  end

  # TERM (Puma stops its workers, then itself), KILL to its process group
  # (the master and its workers) if it has not within 30 s; the wait for
  # the KILLed master is bounded too.
  def stop_puma(pid)
    Process.kill(:TERM, pid)
    ChildProcess.wait(pid, within: 30) || ChildProcess.stop(pid, signal: :KILL)
  rescue Errno::ESRCH, Errno::ECHILD
    ChildProcess.stop(pid, signal: :KILL)
  end

  def wait_for(what, seconds = 60)
    deadline = monotonic + seconds
    until yield
      raise "waited #{seconds} s for #{what}" if monotonic > deadline

      sleep 0.05
    end
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # One request on a connection of its own, so that any worker may accept it.
  def request(port, password, req)
    req.basic_auth("ops", password)
    Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: 30) { |http| http.request(req) }
  end

  def get(port, password, path)
    request(port, password, Net::HTTP::Get.new(path))
  end

  # The status JSON, reloaded until every worker of `pids` (or two workers,
  # the first time) answered at least twice and 10 reloads were made:
  # [[pid, document], ...].
  def reload_until_every_worker(port, password, pids = nil)
    answers = []
    deadline = monotonic + 60
    loop do
      doc = JSON.parse(get(port, password, "/circuit_breakers/status.json").body)
      answers << [doc["pid"], doc]
      seen = answers.map(&:first).tally
      done = pids ? pids.all? { |p| seen.fetch(p, 0) >= 2 } : seen.size == 2 && seen.values.min >= 2
      return answers if done && answers.size >= 10
      raise "not every worker answered within 60 s: #{seen}" if monotonic > deadline
    end
  end

  def state_of(doc)
    doc["breakers"].find { |b| b["name"] == "orders" }.fetch("metrics").fetch("state")
  end

  # The page's buttons: one POST of `action` with the page's CSRF token.
  def post_action(port, password, action)
    page = get(port, password, "/circuit_breakers/")
    cookie = page["set-cookie"][/\Acircuit_breaker_csrf=\h+/]
    req = Net::HTTP::Post.new("/circuit_breakers/breakers/#{action}?name=orders")
    req["cookie"] = cookie
    req.set_form_data("csrf_token" => page.body[/name="csrf_token" value="(\h+)"/, 1])
    request(port, password, req)
  end

  before(:all) do
    # Puma's HTTP parser is a C extension (spec/support/debian_packages.rb).
    DebianPackages.skip_unless_usable(self, "puma")
    @seen = {}
    status = [200]
    upstream = start_upstream(status)
    Dir.mktmpdir do |dir|
      log = File.join(dir, "puma.log")
      env = {
        "RUBYOPT" => "-I#{File.join(root, 'lib')}", "ORDERS_URL" => "http://127.0.0.1:#{upstream.config[:Port]}",
        "BREAKERS_PASSWORD" => password, "PUMA_BIND" => nil,
        # An app as deployed, not a test suite (whose breakers stay per process).
        "RACK_ENV" => "production", "RAILS_ENV" => nil, "APP_ENV" => nil,
        # This boot's host-wide breakers its own (docs/shared.md).
        "CIRCUIT_BREAKER_SHM_DIR" => dir
      }
      pid, port = start_puma(app, env, log)
      begin
        scenario(port, password, status)
      ensure
        stop_puma(pid)
        @seen[:log] = File.read(log)
      end
    end
  ensure
    upstream&.shutdown
  end

  # Load on /orders (4 clients) and scrapes of /metrics and the JSON
  # throughout, while the upstream fails, the breaker opens, the page forces
  # it open and resets it.
  def scenario(port, password, status)
    stop = false
    scrapes = []
    orders = []
    clients = Array.new(4) do
      Thread.new do
        until stop
          response = get(port, password, "/orders")
          orders << [Integer(response["x-served-by"]), response.code, response["retry-after"]]
        end
      end
    end
    clients << Thread.new do
      until stop
        metrics = get(port, password, "/circuit_breakers/metrics")
        calls = Integer(metrics.body[/^circuit_breaker_calls_total\{breaker="orders"\} (\d+)$/, 1])
        scrapes << [Integer(metrics["x-served-by"]), calls]
        doc = JSON.parse(get(port, password, "/circuit_breakers/status.json").body)
        scrapes << [doc["pid"], doc["breakers"].first["metrics"]["calls"]]
      end
    end
    clients.each { |t| t.report_on_exception = false }

    @seen[:closed] = reload_until_every_worker(port, password)
    workers = @seen[:closed].map(&:first).uniq
    @seen[:workers] = workers
    status[0] = 500
    wait_for("the breaker to open") { state_of(JSON.parse(get(port, password, "/circuit_breakers/status.json").body)) == "open" }
    @seen[:open] = reload_until_every_worker(port, password, workers)
    wait_for("/orders to be rejected by both workers") { (workers - orders.select { |_, code, _| code == "503" }.map(&:first)).empty? }
    @seen[:force_open] = post_action(port, password, "force_open").code
    @seen[:forced_open] = reload_until_every_worker(port, password, workers)
    status[0] = 200
    @seen[:reset] = post_action(port, password, "reset").code
    @seen[:after_reset] = reload_until_every_worker(port, password, workers)
    @seen[:pages] = {}
    wait_for("the page from each worker") do
      page = get(port, password, "/circuit_breakers/")
      @seen[:pages][Integer(page["x-served-by"])] = page.body
      (workers - @seen[:pages].keys).empty?
    end
    calls = @seen[:after_reset].last.last["breakers"].first["metrics"]["calls"]
    wait_for("calls after the reset") { scrapes.any? { |_, n| n > calls } }
    wait_for("10 scrapes answered by each worker") { workers.all? { |w| scrapes.count { |pid, _| pid == w } >= 10 } }
  ensure
    stop = true
    clients&.each(&:value) # raises what a client raised
    @seen[:scrapes] = scrapes
    @seen[:orders] = orders
  end

  it "runs docs/rails.md's initializer (Rails.logger aside) in 2 workers" do
    rails = File.read(File.join(root, "spec/fixtures/rails_app/config/initializers/circuit_breaker.rb"))
    expect(File.read(File.join(app, "config/initializers/circuit_breaker.rb"))).to eq(rails.sub("Rails.logger.error", "LOGGER.error"))
    expect(@seen[:workers].size).to eq(2)
    expect(@seen[:log]).to include("[alert] circuit orders opened")
  end

  it "answers one state on every reload of the status page, whichever worker answers" do
    { closed: "closed", open: "open", forced_open: "forced_open", after_reset: "closed" }.each do |phase, state|
      answers = @seen.fetch(phase)
      expect(answers.map(&:first).uniq).to match_array(@seen[:workers]), "#{phase}: both workers answered"
      expect(answers.map { |_, doc| state_of(doc) }.uniq).to eq([state]), "#{phase}: #{answers.map { |p, d| [p, state_of(d)] }}"
    end
  end

  it "forces open and resets every worker's breaker with one POST from the page" do
    expect([@seen[:force_open], @seen[:reset]]).to eq(%w[303 303])
    expect(@seen[:forced_open].map { |_, doc| state_of(doc) }.uniq).to eq(["forced_open"])
    expect(@seen[:after_reset].map { |_, doc| state_of(doc) }.uniq).to eq(["closed"])
  end

  it "never scrapes calls_total going down, whichever worker answers" do
    scrapes = @seen[:scrapes]
    expect(scrapes.map(&:first).uniq).to match_array(@seen[:workers])
    downs = scrapes.each_cons(2).select { |(_, a), (_, b)| b < a }
    expect(downs).to be_empty, "calls_total went down in #{downs.size} of #{scrapes.size} scrapes: #{downs.first(5)}"
    # Calls before the opening, and after the reset.
    expect(scrapes.last.last).to be > @seen[:open].last.last["breakers"].first["metrics"]["calls"]
  end

  it "shows on the page and in the JSON the pid and host that answered and the host scope" do
    host = Socket.gethostname
    @seen[:pages].each do |pid, html|
      expect(html).to include("served by pid #{pid} on #{CGI.escapeHTML(host)}")
      expect(html).to include(%(<span class="scope" data-scope="host">host-wide</span>))
    end
    @seen[:closed].each do |pid, doc|
      expect(doc).to include("host" => host, "pid" => pid)
      expect(doc["breakers"].first).to include("name" => "orders", "scope" => "host", "seen_by" => "every process of #{host}")
    end
  end

  it "rejects /orders in every worker once open, with a Retry-After of at most open_duration" do
    rejected = @seen[:orders].select { |_, code, _| code == "503" }
    expect(rejected.map(&:first).uniq).to match_array(@seen[:workers])
    expect(rejected.map(&:last).compact.map(&:to_i)).to all(be_between(1, 30))
  end
end
