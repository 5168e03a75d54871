# frozen_string_literal: true

require "circuit_breaker/fleet"

# lib/circuit_breaker/fleet.lua run by a real redis-server, where what it
# keeps cannot be seen through a breaker without waiting (docs/fleet.md).
RSpec.describe "The fleet script", :redis do
  let(:tag) { "script-#{SecureRandom.hex(4)}" }
  let(:keys) { ["circuit_breaker:{#{tag}}:hosts", "circuit_breaker:{#{tag}}:state"] }

  # The state's code in the script.
  def half_open = 2

  # One send of host "h" (its report as lib/circuit_breaker/fleet.lua's
  # REPORT names the words); returns the reply's integers.
  def send_report(kind: 0, expected: -1, state: 0, stage: 0, host: "h", total: 0, alone: 0, reset: 0)
    report = [1_000, 60_000, 2, total, 0, 0, 0, 0, 0, 0, kind, expected, state, 5, 0, 0, stage, alone, reset, 0]
    reply = redis_server.command("EVAL", CircuitBreaker::Fleet::SCRIPT, 2, *keys, host, report.join(" "),
                                 "#{tag}:changed")
    reply.split(" ").map { |w| Integer(w, 10) }
  end

  # Moves the stage's start (and the round's, unless `round: false`) `ms` back.
  def age(ms, round: true)
    t = Integer(redis_server.command("HGET", keys[1], "t")) - ms
    redis_server.command("HSET", keys[1], "t", t, *(round ? ["rt", t] : []))
  end

  it "keeps the stage's start over a new round of the stage, and starts the round's" do
    send_report(kind: 2, state: half_open) # a command: half-open, stage 0, version 1
    age(5_000)
    reply = send_report(kind: 1, expected: 1, state: half_open) # the stage starts over
    stage_elapsed = reply[9]
    round_elapsed = reply[19]
    expect(stage_elapsed).to be >= 5_000 # min_stage_duration counts from here
    expect(round_elapsed).to be < 5_000 # half_open_timeout from here
  end

  it "reads a state with no round start (an older gem wrote it) as one round since the stage began" do
    send_report(kind: 2, state: half_open)
    redis_server.command("HDEL", keys[1], "rt")
    age(5_000, round: false)
    reply = send_report
    expect(reply[19]).to eq(reply[9])
    expect(reply[9]).to be >= 5_000
  end

  it "counts the hosts that opened alone and their calls, and reads an older gem's report as not alone" do
    send_report(host: "a", total: 100, alone: 1)
    now_ms = redis_server.command("TIME").then { |sec, usec| (Integer(sec) * 1000) + (Integer(usec) / 1000) }
    redis_server.command("HSET", keys[0], "old", "#{now_ms} 40 0 0 0 0 0 0 0") # nine words
    reply = send_report(host: "b", total: 60)
    expect(reply.size).to eq(CircuitBreaker::Fleet.const_get(:REPLY_FIELDS).size)
    expect([reply[10], reply[13], reply[20], reply[21]]).to eq([200, 3, 1, 100])
  end

  it "counts after a reset! only the reports made since it" do
    send_report(host: "a", total: 30)
    reply = send_report(host: "op", kind: 2, state: 0) # reset!: a command to closed
    reset = reply[22]
    expect(reset).to be > 0
    expect(reply[10]).to eq(0) # a's 30 calls were reported before it
    expect(send_report(host: "a", total: 30)[10]).to eq(0) # resent before a followed it
    expect(send_report(host: "a", total: 5, reset: reset)[10]).to eq(5)
  end
end
