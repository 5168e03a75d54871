# frozen_string_literal: true

# `rake bench`: runs every scenario of bench/scenarios.rb in a Ruby process
# of its own and prints one table.
#
#   ruby bench/run.rb [SCENARIO...]     # default: all
#   BENCH_SCALE=0.3 ruby bench/run.rb   # shorter samples (noisier)
#   BENCH_ROUNDS=11 ruby bench/run.rb   # more interleaved rounds
#
# Every figure is the median of BENCH_ROUNDS (7) rounds; in each round the
# implementations of a scenario run one after the other, in an order that
# rotates from round to round. A sample lasts about 0.1 s × BENCH_SCALE
# (the thread scenario's, 0.2 s × BENCH_SCALE per thread).

$stdout.sync = true

require "etc"
require "json"
require "rbconfig"

root = File.expand_path("..", __dir__)
scenarios_file = File.join(__dir__, "scenarios.rb")
all = %w[success failure rejection rejection_as threads rates shared capped fleet adapters]
names = ARGV.empty? ? all : ARGV
unknown = names - all
abort "unknown scenario(s): #{unknown.join(', ')} (known: #{all.join(', ')})" unless unknown.empty?

cpu = File.foreach("/proc/cpuinfo").find { |l| l.start_with?("model name") }&.split(":", 2)&.last&.strip
puts "Ruby #{RUBY_DESCRIPTION}"
puts "#{Etc.nprocessors} CPUs (nproc), #{cpu || 'unknown CPU'}"
puts "BENCH_SCALE=#{ENV.fetch('BENCH_SCALE', '1')} BENCH_ROUNDS=#{ENV.fetch('BENCH_ROUNDS', '7')} " \
     "BENCH_CLOCK=#{ENV['BENCH_CLOCK'] == 'wall' ? 'wall' : 'cpu'}; medians of the rounds"
puts

rows = []
started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
names.each do |name|
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  out = IO.popen([RbConfig.ruby, "-I", File.join(root, "lib"), scenarios_file, name], &:read)
  abort "bench: scenario #{name} failed (exit #{$?.exitstatus})" unless $?.success?
  rows.concat(JSON.parse(out.lines.last, symbolize_names: true))
  warn format("bench: %-10s %5.1f s", name, Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0)
end
warn format("bench: total %.1f s", Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)

notes, rows = rows.partition { |r| r.key?(:note) }
fmt_ns = ->(ns) { ns >= 10_000 ? format("%.0f", ns) : format("%.1f", ns) }
fmt_x = ->(x) { x >= 100 ? format("%.0f×", x) : format("%.2f×", x) }
table = rows.map do |r|
  met = r[:met].nil? ? "—" : (r[:met] ? "yes" : "no")
  target = r[:value] ? "#{r[:target]}: #{fmt_x.(r[:value])}" : r[:target]
  target += " (#{r[:value_note]})" if r[:value_note]
  [r[:scenario], r[:impl], fmt_ns.(r[:ns]), fmt_x.(r[:ratio]), format("%.2f", r[:allocs]), target, met]
end
header = ["scenario", "implementation", "ns/call", "× bare", "allocs/call", "target", "met"]
widths = header.each_index.map { |i| ([header] + table).map { |row| row[i].to_s.length }.max }
line = lambda { |cells|
  "| " + cells.each_with_index.map do |c, i|
           i.between?(2, 4) ? c.to_s.rjust(widths[i]) : c.to_s.ljust(widths[i])
         end.join(" | ") + " |"
}
puts line.(header)
puts "|" + widths.each_with_index.map { |w, i| i.between?(2, 4) ? "#{'-' * (w + 1)}:" : "-" * (w + 2) }.join("|") + "|"
table.each { |row| puts line.(row) }
puts
notes.each { |n| puts "- #{n[:note]}" }
puts "- `ns/call`: median over the rounds; single-threaded loops are timed with the thread's CPU clock " \
     "(BENCH_CLOCK=wall: monotonic clock). `× bare`: median over the rounds of (time / bare time in the same round)."
puts "- 4 threads: `ns/call` is wall time / calls of all 4 threads; the target's figure is " \
     "(4-thread rate) / (1-thread rate) on the same breaker, by wall clock (by the process's CPU time in " \
     "brackets). Ruby's GVL lets one thread run Ruby at a time, so 1.0 is the ceiling: the figure shows what " \
     "sharing the breaker costs (lock contention, hand-offs), not a parallel speed-up."
puts "- Rates: `× bare` compares with plain Ruby running counts; the target's figure is (cost on 10,000 calls) / " \
     "(cost on 10 calls) for the same implementation."
