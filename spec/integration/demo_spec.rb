# frozen_string_literal: true

require "json"
require "net/http"
require "tmpdir"

# bin/demo as a user runs it, shortened (examples/: examples_spec.rb).
RSpec.describe "bin/demo", :integration do
  root = File.expand_path("../..", __dir__)

  it "tells the story in a short run: opens, recovers, closes, and writes the HTML report" do
    Dir.mktmpdir do |dir|
      report = File.join(dir, "report.html")
      out, status = ChildProcess.capture2e({ "DEMO_SCALE" => "0.25", "NO_COLOR" => "1" },
                                           File.join(root, "bin/demo"), "--out", report, chdir: root)

      expect(status).to be_success, out
      # The burst's 500s open it on the window's error rate or, coming in a
      # row, on the default consecutive_failures (docs/choices.md).
      expect(out).to match(/opened \((error rate|failures in a row)/)
      expect(out).to match(/closed \(every ramp stage passed\)/)
      expect(out).to match(/spared by the breaker\s+\d+ calls/)
      expect(out).to include("report: #{report}")
      html = File.read(report)
      expect(html).to include("<svg").and include("error burst").and include("half-open")
      # The breaker's own counters, live and in the report; an open breaker shows what opened it.
      expect(out).to match(/breaker counters\s+calls [1-9]\d*, successes \d+, failures [1-9]\d*, .*opened [1-9]/)
      expect(out).to match(/OPEN\s+\(\d+%\)/)
      expect(html).to include("breaker counters (metrics)")
    end
  end

  it "serves the status page while it runs (--serve)" do
    out = +""
    ChildProcess.popen2e({ "DEMO_SCALE" => "0.25", "NO_COLOR" => "1" }, File.join(root, "bin/demo"),
                         "--serve", "0", "--out", File.join(Dir.tmpdir, "demo-serve-#{Process.pid}.html"),
                         chdir: root) do |stdin, output, waiter|
      stdin.close
      url = nil
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 120
      while url.nil? && (left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)).positive? &&
            (line = ChildProcess.gets(output, within: left))
        out << line
        url = line[%r{status page: (http://127\.0\.0\.1:\d+/)}, 1]
      end
      expect(url).not_to be_nil, out
      status = JSON.parse(Net::HTTP.get(URI("#{url}status.json")))
      expect(status["breakers"].map { |b| b["name"] }).to eq(["orders"])
      expect(Net::HTTP.get(URI("#{url}metrics"))).to include('circuit_breaker_calls_total{breaker="orders"}')
      expect(Net::HTTP.get(URI(url))).to include("<title>Circuit breakers</title>")
      reader = Thread.new { output.each_line { |l| out << l } } # the run goes on to its end
      expect(ChildProcess.finish(waiter.pid, within: 120)).to be_success, out
      reader.join(5)
    end
  end

  it "refuses a bad option" do
    out, status = ChildProcess.capture2e(File.join(root, "bin/demo"), "--scale", "0", chdir: root)

    expect(status).not_to be_success
    expect(out).to include("--scale")
  end
end
