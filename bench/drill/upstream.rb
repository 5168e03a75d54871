# frozen_string_literal: true

# The drill's upstream (docs/development.md, "rake drill"): a real HTTP
# server on 127.0.0.1 that goes through the phases of
# bench/drill/run.rb — healthy, answering 500, hanging past the client's
# read timeout, slow (answering inside it), healthy again — timed from a
# start the driver sends it, on the system-wide monotonic clock. It counts
# what reached it in each phase.
#
#   ruby bench/drill/upstream.rb PORT_FILE HEALTHY ERRORS HANGING SLOW RECOVERED HANG_SECONDS SLOW_MIN SLOW_MAX
#
# In the slow phase each request waits between SLOW_MIN and SLOW_MAX
# seconds (uniform, fixed seed) before its 200.
#
# Control requests: GET /__start?t0=SECONDS (the monotonic time phase 1
# begins), GET /__stats (JSON counts).

require "socket"
require "json"

PHASES = %w[healthy errors hanging slow recovered].freeze
port_file, *numbers = ARGV
abort "usage: upstream.rb PORT_FILE #{PHASES.join(' ').upcase} HANG SLOW_MIN SLOW_MAX" unless numbers.size == 8

lengths = numbers.first(5).map { |n| Float(n) }
hang, slow_min, slow_max = numbers.last(3).map { |n| Float(n) }
ENDS = lengths.each_index.map { |i| lengths.first(i + 1).sum }.freeze

start = nil
counts = Hash.new(0)
lock = Mutex.new
random = Random.new(35)

phase_at = lambda do |now|
  return "before" if start.nil? || now < start

  index = ENDS.index { |t| now - start < t }
  index ? PHASES[index] : "after"
end

reply = lambda do |socket, status, body|
  reason = { 200 => "OK", 500 => "Internal Server Error" }.fetch(status)
  socket.write("HTTP/1.1 #{status} #{reason}\r\nContent-Type: text/plain\r\n" \
               "Content-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
end

server = TCPServer.new("127.0.0.1", 0)
File.write("#{port_file}.tmp", server.addr[1].to_s)
File.rename("#{port_file}.tmp", port_file)

loop do
  client = server.accept
  Thread.new(client) do |socket|
    line = socket.gets.to_s
    nil while (header = socket.gets) && header != "\r\n"
    path = line.split[1].to_s
    if path.start_with?("/__start")
      lock.synchronize do
        start = Float(path[/t0=([\d.]+)/, 1])
        counts.clear
      end
      reply.call(socket, 200, "started")
    elsif path == "/__stats"
      reply.call(socket, 200, lock.synchronize { JSON.generate(counts) })
    else
      phase = phase_at.call(Process.clock_gettime(Process::CLOCK_MONOTONIC))
      pause = lock.synchronize do
        counts[phase] += 1
        random.rand(slow_min..slow_max) if phase == "slow"
      end
      case phase
      when "errors" then reply.call(socket, 500, "failing")
      when "hanging"
        # Longer than the client's read timeout; the client gives up first.
        sleep hang
        reply.call(socket, 200, "late")
      when "slow"
        # Inside the client's read timeout: the call succeeds, late.
        sleep pause
        reply.call(socket, 200, "slow")
      else reply.call(socket, 200, "ok")
      end
    end
  rescue IOError, SystemCallError
    nil # the client gave up (a read timeout closed its end)
  ensure
    socket.close
  end
end
