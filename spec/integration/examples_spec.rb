# frozen_string_literal: true

require "json"
require "net/http"
require "socket"
require "tmpdir"

# Every file in examples/ as a user runs it (shortened where it has a
# scale), so an example never rots. A file added to examples/ without a
# row here fails the last example.
RSpec.describe "examples/", :integration do
  root = File.expand_path("../..", __dir__)
  run = lambda do |file, env = {}|
    ChildProcess.capture2e(env, RbConfig.ruby, File.join(root, "examples", file), chdir: root)
  end

  it "first_breaker.rb is the README's first example verbatim, and it trips" do
    readme = File.read(File.join(root, "README.md"))
    snippet = readme[/## A first breaker.*?```ruby\n(.*?)```/m, 1]
    expect(File.read(File.join(root, "examples/first_breaker.rb"))).to include(snippet)

    out, status = run.call("first_breaker.rb")

    expect(status).to be_success, out
    expect(out.lines.grep(/request failed/).size).to eq(5)
    expect(out.lines.grep(/rejected without a request \(circuit is open\)/).size).to eq(3)
  end

  it "articles.rb holds the articles' snippet (docs/semantics.md) verbatim, and the breaker opens" do
    snippet = File.read(File.join(root, "docs/semantics.md"))[/### The articles' names.*?# The article's snippet:\n(.*?)```/m, 1]
    expect(File.read(File.join(root, "examples/articles.rb"))).to include(snippet)

    out, status = run.call("articles.rb", "ARTICLES_SCALE" => "0.3")

    expect(status).to be_success, out
    # The upstream's 500s come in a row: the default consecutive_failures
    # (docs/choices.md) opens it before the window's min_calls.
    expect(out).to include("closed -> open (consecutive_failures)")
    expect(out).to match(/served from cache [1-9]\d* \(never sent\); breaker open/)
  end

  it "puma_style.rb: the workers trip one shared breaker", :shared_memory do
    out, status = run.call("puma_style.rb", "CIRCUIT_BREAKER_SHM_DIR" => ENV.fetch("CIRCUIT_BREAKER_SHM_DIR", Dir.tmpdir))

    expect(status).to be_success, out
  end

  it "sinatra_app.rb serves /orders and /health on the port it is given" do
    port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    out = +""
    ChildProcess.popen2e({ "PORT" => port.to_s }, RbConfig.ruby, File.join(root, "examples/sinatra_app.rb"),
                         chdir: root) do |stdin, output, waiter|
      stdin.close
      reader = Thread.new { output.each_line { |l| out << l } }
      health = nil
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
      while health.nil? && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline && waiter.alive?
        begin
          health = Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/health"))
        rescue SystemCallError
          Thread.pass
          sleep 0.1 # waiting for the server to boot, not for timing
        end
      end
      expect(health&.code).to eq("200"), out
      expect(JSON.parse(health.body)).to include("breaker" => "orders", "state" => "closed")
      expect(Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/orders")).code).to eq("200")
    ensure
      ChildProcess.stop(waiter.pid) if waiter&.alive? # TERM, then KILL: a Puma may ignore TERM
      reader&.join(5)
    end
  end

  it "fleet_story.rb (bin/demo --fleet): hosts alone, then with fleet: on a real redis-server paused midway" do
    skip "redis-server is not installed (bin/setup installs it)" unless RedisServer.available?

    Dir.mktmpdir do |dir|
      report = File.join(dir, "fleet.html")
      out, status = ChildProcess.capture2e(File.join(root, "bin/demo"), "--fleet", "--fast", "--hosts", "3",
                                           "--out", report, chdir: root)

      expect(status).to be_success, out
      expect(out).to match(/each host alone\s+\d+ calls reached the upstream during its error burst/)
      expect(out).to match(/fleet: on Redis\s+\d+ calls reached the upstream.*Redis paused/)
      expect(File.read(report).scan("<svg").size).to eq(2)
    end
  end

  it "has a row here for every file in examples/" do
    # demo.rb runs through bin/demo, in spec/integration/demo_spec.rb.
    covered = %w[first_breaker.rb articles.rb puma_style.rb sinatra_app.rb fleet_story.rb demo.rb]

    expect(Dir.children(File.join(root, "examples")).grep(/\.rb\z/).sort).to eq(covered.sort)
  end
end
