# frozen_string_literal: true

require "socket"
begin
  require "circuit_breaker/grpc"
rescue LoadError => e
  # bin/test installs ruby-grpc (spec/support/debian_packages.rb).
  reason = DebianPackages.load_error_reason(e, "ruby-grpc")
  RSpec.describe "CircuitBreaker::Adapters::GRPC" do
    it("protects calls to a real gRPC server") { skip reason }
  end
  return
end

# A message without protobuf: a string on the wire.
GrpcSpecText = Struct.new(:text) do
  def self.marshal(message) = message.text.to_s
  def self.unmarshal(bytes) = new(bytes)
end

# A real gRPC server (in this process, on 127.0.0.1): `Answer` answers
# what the request asks for: "ok", a status to raise ("unavailable",
# "resource_exhausted", "invalid_argument"), or "slow" (past the caller's
# deadline). It counts the calls it gets.
class GrpcSpecService
  include GRPC::GenericService

  self.service_name = "circuit_breaker.spec.Echo"
  self.marshal_class_method = :marshal
  self.unmarshal_class_method = :unmarshal
  rpc :Answer, GrpcSpecText, GrpcSpecText

  @calls = Queue.new
  class << self
    attr_reader :calls
  end

  def answer(message, _call)
    request = message.text
    self.class.calls << request
    case request
    when "unavailable" then raise GRPC::Unavailable, "down for the spec"
    when "resource_exhausted" then raise GRPC::ResourceExhausted, "too busy"
    when "invalid_argument" then raise GRPC::InvalidArgument, "bad request"
    when "slow" then sleep 0.5 # the server side of a deadline: the caller gives up after 50 ms
    end
    message
  end
end

GrpcSpecStub = GrpcSpecService.rpc_stub_class

RSpec.describe CircuitBreaker::Adapters::GRPC::Interceptor do
  include Waiting

  before(:all) do
    # grpc 1.51 (Debian 12 and 13) is not compaction-safe either: after
    # spec/breaker/gc_spec.rb's GC.compact, Ruby 3.3 raised "broken
    # members" from run_batch, or crashed there. As for mysql2
    # (active_record_spec.rb): bin/test also runs spec/adapters in a process
    # of its own, where these run.
    if GC.stat(:compact_count).positive?
      skip "the heap was compacted in this process and grpc 1.51 is not compaction-safe; " \
           "`rspec spec/adapters` (bin/test runs it) runs these"
    end
    @server = GRPC::RpcServer.new(pool_size: 4)
    @port = @server.add_http2_port("127.0.0.1:0", :this_port_is_insecure)
    @server.handle(GrpcSpecService)
    @thread = Thread.new { @server.run }
    @server.wait_till_running(10)
  end

  after(:all) do
    @server&.stop
    @thread&.join(10)
  end

  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:options) { { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 3, open_duration: 10, clock: clock } }
  let(:target) { "127.0.0.1:#{@port}" }
  let(:interceptor) { described_class.new(target, **options) }
  let(:stub) { GrpcSpecStub.new(target, :this_channel_is_insecure, interceptors: [interceptor]) }

  after do
    CircuitBreaker::Adapters::GRPC.clear!
    CircuitBreaker.forget_all!
  end

  def calls_made = GrpcSpecService.calls.size

  # A call the server takes while none of its 4 workers is idle is answered
  # RESOURCE_EXHAUSTED, "No free threads in thread pool" (grpc's
  # RpcServer#available?), and a worker that has sent its answer is idle
  # again only once it runs: on a loaded machine, after the next call came
  # (rpc_server.rb, Pool#loop_execute_jobs). Only these examples call the
  # server, one call at a time, so a worker idle now is still idle when
  # this call arrives.
  def ask(text, deadline: 5)
    wait_for("an idle gRPC server worker") { @server.instance_variable_get(:@pool).ready_for_work? }
    stub.answer(GrpcSpecText.new(text), deadline: Time.now + deadline).text
  rescue GRPC::BadStatus => e
    e
  end

  it "records answers as successes, other statuses too" do
    expect(ask("ok")).to eq("ok")
    expect(ask("invalid_argument")).to be_a(GRPC::InvalidArgument)
    expect(interceptor.breaker.metrics.slice(:total, :failures)).to eq(total: 2, failures: 0)
    expect(interceptor.breaker.name).to eq("grpc:#{target}")
  end

  it "records UNAVAILABLE, RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED as failures, opens, and rejects without a call" do
    outcomes = [ask("unavailable"), ask("resource_exhausted"), ask("slow", deadline: 0.05)]
    before = calls_made

    rejected = ask("ok")

    expect(outcomes.map(&:class)).to eq([GRPC::Unavailable, GRPC::ResourceExhausted, GRPC::DeadlineExceeded])
    expect(interceptor.breaker.state).to eq(:open)
    expect(calls_made).to eq(before)
    expect(rejected).to be_a(CircuitBreaker::Adapters::GRPC::OpenError).and be_a(GRPC::Unavailable)
    expect(CircuitBreaker::OpenError === rejected).to be(true)
    expect(rejected.breaker_name).to eq("grpc:#{target}")
    expect(rejected.code).to eq(GRPC::Core::StatusCodes::UNAVAILABLE)
  end

  it "probes after open_duration and closes when the server answers" do
    3.times { ask("unavailable") }
    clock.advance(10)

    expect([ask("ok"), ask("ok")]).to eq(%w[ok ok])
    expect(interceptor.breaker.state).to eq(:closed)
  end

  it "passes max_concurrent: and max_wait: to the breaker it builds; over the cap, its rejection says :concurrency_limit" do
    capped = described_class.new(target, max_concurrent: 1, max_wait: 0.05, **options)
    client = GrpcSpecStub.new(target, :this_channel_is_insecure, interceptors: [capped])
    wait_for("an idle gRPC server worker") { @server.instance_variable_get(:@pool).ready_for_work? } # as in ask
    expect(client.answer(GrpcSpecText.new("ok"), deadline: Time.now + 5).text).to eq("ok")
    expect(capped.breaker.metrics).to include(concurrency_limit: 1, in_flight: 0)
    before = calls_made

    # The only slot held around the call: it waits max_wait for one, then is refused.
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    rejected = capped.breaker.call do
      client.answer(GrpcSpecText.new("ok"), deadline: Time.now + 5)
    rescue GRPC::BadStatus => e
      e
    end
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started

    expect(rejected).to be_a(CircuitBreaker::Adapters::GRPC::OpenError).and be_a(GRPC::Unavailable)
    expect(rejected).to have_attributes(reason: :concurrency_limit, limit: 1, breaker_name: "grpc:#{target}")
    expect(CircuitBreaker::ConcurrencyLimitError === rejected).to be(true)
    expect(waited).to be >= 0.05
    expect(calls_made).to eq(before)
    expect(capped.breaker.metrics).to include(limited: 1, in_flight: 0, failures: 0)
  end

  it "counts a server nobody runs as unavailable" do
    port = TCPServer.new("127.0.0.1", 0).then { |s| s.addr[1].tap { s.close } }
    down = described_class.new("127.0.0.1:#{port}", **options)
    client = GrpcSpecStub.new("127.0.0.1:#{port}", :this_channel_is_insecure, interceptors: [down])

    3.times { expect { client.answer(GrpcSpecText.new("ok"), deadline: Time.now + 5) }.to raise_error(GRPC::Unavailable) }

    expect(down.breaker.state).to eq(:open)
  end

  it "refuses bad arguments, naming them" do
    expect { described_class.new }.to raise_error(ArgumentError, /target .* or breaker:/)
    expect { described_class.new(breaker: 1) }.to raise_error(TypeError, /breaker:/)
    expect { described_class.new(target, failure_errors: [1]) }.to raise_error(TypeError, /failure_errors/)
  end
end
