# frozen_string_literal: true

require "rack"
require "timeout"
require "tmpdir"
require_relative "../../examples/support/flaky_upstream"

# Every ```ruby block of README.md and docs/*.md, run as written, each in a
# fresh Ruby with only the gem's lib/ on the load path (as an installed gem
# is): nothing is added to a block, no require and no definition. Where a
# block makes a request, a real server on 127.0.0.1 answers it: hosts such
# as orders.internal reach the local upstream through `http_proxy`
# (Net::HTTP and Faraday read it; 127.0.0.1 is never proxied), and
# REDIS_URL names a local redis-server.
#
# The line before a block may say how else it runs:
# - `<!-- doc-test: rackup [PATH...] -->`: a config.ru, built with
#   Rack::Builder and asked for each PATH (default: each path it maps),
#   which must answer 200;
# - `<!-- doc-test: verbatim in PATH -->`: a file of an app (a Rails
#   initializer, a controller) that PATH holds verbatim, and that the spec
#   booting that app runs (spec/integration/rails_spec.rb,
#   user_suite_spec.rb, examples_spec.rb);
# - `<!-- fragment -->`: not run (a Gemfile line, say); at most five.
RSpec.describe "the Ruby blocks of README.md and docs/", :integration do
  root = File.expand_path("../..", __dir__)
  lib = File.join(root, "lib")
  marker = /\A<!--\s*(fragment|doc-test:\s*(.+?))\s*-->\s*\z/

  blocks = ["README.md", *Dir[File.join(root, "docs", "*.md")].sort.map { |f| f.delete_prefix("#{root}/") }].flat_map do |file|
    lines = File.readlines(File.join(root, file))
    lines.each_index.filter_map do |i|
      next unless lines[i].start_with?("```ruby")

      close = (i + 1...lines.size).find { |j| lines[j].start_with?("```") } or raise "#{file}:#{i + 1}: unclosed block"
      how = i.positive? && lines[i - 1].strip[marker] ? (Regexp.last_match(2) || Regexp.last_match(1)) : "script"
      { file: file, line: i + 1, how: how, code: lines[i + 1...close].join }
    end
  end

  before(:all) do
    # Healthy for the whole run (scale): the blocks' requests get a 200.
    @upstream = CircuitBreaker::Examples::FlakyUpstream.start(scale: 1000, stop_after: 900)
    @redis = RedisServer.start if RedisServer.available?
    @shm = Dir.mktmpdir("cb-docs-shm-")
  end

  after(:all) do
    @upstream&.stop
    @redis&.stop
    FileUtils.rm_rf(@shm) if @shm
  end

  # Runs `code` in a fresh Ruby in an empty directory; stopped (its process
  # group: TERM, then KILL) after `limit` seconds.
  def run_ruby(code, lib, limit: 60)
    Dir.mktmpdir("cb-doc-") do |dir|
      env = { "RUBYOPT" => "-I#{lib}", "http_proxy" => @upstream.url, "HTTP_PROXY" => nil, "no_proxy" => nil,
              "NO_PROXY" => nil, "REDIS_URL" => @redis&.url, "CIRCUIT_BREAKER_SHM_DIR" => @shm,
              "BREAKERS_PASSWORD" => "doc-test" }
      ChildProcess.capture2e(env, RbConfig.ruby, "-e", code, chdir: dir, within: limit)
    end
  end

  it "finds the blocks, and marks at most five as fragments" do
    fragments = blocks.select { |b| b[:how] == "fragment" }.map { |b| "#{b[:file]}:#{b[:line]}" }

    expect(blocks.size).to be > 25
    expect(fragments.size).to be <= 5, "fragments: #{fragments.join(', ')}"
    RSpec.configuration.reporter.message("docs: #{blocks.size} Ruby blocks, #{blocks.size - fragments.size} run; " \
                                         "fragments: #{fragments.join(', ')}")
  end

  blocks.reject { |b| b[:how] == "fragment" }.each do |block|
    where = "#{block[:file]}:#{block[:line]}"

    case block[:how]
    when "script"
      it "#{where} runs as written" do
        skip "redis-server is not installed (bin/test installs it)" if block[:code].include?("REDIS_URL") && @redis.nil?
        # What docs/install.md says builds without shared records refuse.
        skip "shared: needs a build with shared records" if block[:code].include?("shared:") && !CircuitBreaker.shared_supported?
        if block[:code].include?('require "async"') && !FiberSchedulers.async?
          skip "the async gem cannot be loaded here: #{FiberSchedulers.async_error}"
        end
        # The packages of the adapters' examples (spec/support/debian_packages.rb).
        { /adapter: "postgresql"/ => %w[ruby-pg], /adapter: "mysql2"/ => %w[ruby-mysql2],
          %r{circuit_breaker/sidekiq} => %w[ruby-sidekiq ruby-json], %r{circuit_breaker/grpc} => %w[ruby-grpc] }
          .each { |code, packages| DebianPackages.skip_unless_usable(self, *packages) if block[:code].match?(code) }
        out, status = run_ruby(block[:code], lib)

        expect(status).to be_success, "#{where} failed:\n#{out}"
      end
    when /\Arackup(.*)\z/
      paths = Regexp.last_match(1).split
      paths = block[:code].scan(/map[ (]"([^"]+)"/).flatten.map { |p| p.end_with?("/") ? p : "#{p}/" } if paths.empty?
      it "#{where} serves #{paths.join(', ')}" do
        code = <<~RUBY
          require "rack"
          require "rack/mock"
          app = Rack::Builder.new_from_string(#{block[:code].dump})
          auth = "Basic " + ["ops:doc-test"].pack("m0")
          responses = #{paths.inspect}.map do |path|
            Rack::MockRequest.new(app).get(path, "HTTP_AUTHORIZATION" => auth)
          end
          abort responses.map { |r| "\#{r.status} \#{r.body[0, 300]}" }.join("\n") unless responses.all? { |r| r.status == 200 }
        RUBY
        out, status = run_ruby(code, lib)

        expect(status).to be_success, "#{where} failed:\n#{out}"
      end
    when /\Averbatim in (\S+)\z/
      path = Regexp.last_match(1)
      it "#{where} is #{path} verbatim (run by the spec of that app)" do
        expect(File.read(File.join(root, path))).to include(block[:code])
      end
    else
      raise "#{where}: unknown doc-test marker #{block[:how].inspect}"
    end
  end
end
