# frozen_string_literal: true

require "open3"
require "tmpdir"

# bin/demo as a user runs it, shortened (examples/: examples_spec.rb).
RSpec.describe "bin/demo", :integration do
  root = File.expand_path("../..", __dir__)

  it "tells the story in a short run: opens, recovers, closes, and writes the HTML report" do
    Dir.mktmpdir do |dir|
      report = File.join(dir, "report.html")
      out, status = Open3.capture2e({ "DEMO_SCALE" => "0.25", "NO_COLOR" => "1" },
                                    RbConfig.ruby, File.join(root, "bin/demo"), "--out", report, chdir: root)

      expect(status).to be_success, out
      expect(out).to match(/opened \(error rate/)
      expect(out).to match(/closed \(every ramp stage passed\)/)
      expect(out).to match(/spared by the breaker\s+\d+ calls/)
      expect(out).to include("report: #{report}")
      html = File.read(report)
      expect(html).to include("<svg").and include("error burst").and include("half-open")
    end
  end

  it "refuses a bad option" do
    out, status = Open3.capture2e(RbConfig.ruby, File.join(root, "bin/demo"), "--scale", "0", chdir: root)

    expect(status).not_to be_success
    expect(out).to include("--scale")
  end
end
