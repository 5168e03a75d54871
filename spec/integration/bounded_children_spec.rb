# frozen_string_literal: true

# Every process a spec starts goes through spec/support/child_process.rb,
# which bounds it (docs/development.md, "Testing"): Open3's block forms,
# IO.popen, a bare fork or spawn, Process.wait and Kernel#system wait
# without one. The fixtures (an app's own suites, run in bounded children)
# are theirs to write.
RSpec.describe "the suite's child processes" do
  root = File.expand_path("../..", __dir__)
  unbounded = /
    \bOpen3\. | \bIO\.popen\b | (?<![.\w])fork\s*(?:do\b|\{) | \b(?:Kernel|Process)\.fork\b |
    \bProcess\.(?:wait\w*|spawn|detach)\b | (?<![.\w])system\s*\( | \bKernel\.system\b | %x[({\[]
  /x

  it "are all started through ChildProcess" do
    files = Dir[File.join(root, "spec/**/*.rb")].reject do |f|
      f.start_with?(File.join(root, "spec/fixtures/")) ||
        [File.join(root, "spec/support/child_process.rb"), File.expand_path(__FILE__)].include?(f)
    end
    found = files.sort.flat_map do |file|
      File.foreach(file).with_index(1).filter_map do |line, n|
        "#{file.delete_prefix("#{root}/")}:#{n}: #{line.strip}" if !line.match?(/\A\s*#/) && line.match?(unbounded)
      end
    end

    expect(files.size).to be > 50
    expect(found).to be_empty, "start these through ChildProcess (spec/support/child_process.rb):\n#{found.join("\n")}"
  end
end
