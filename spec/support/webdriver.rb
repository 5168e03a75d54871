# frozen_string_literal: true

require "json"
require "net/http"
require "socket"
require "tmpdir"
require_relative "child_process"

# A tiny W3C WebDriver client over Net::HTTP, for Debian's chromedriver
# driving a headless chromium (no gem, nothing downloaded). Only what the
# browser specs use: open a page, find an element, click it, read an
# attribute, take a screenshot. Every wait is bounded.
class WebDriver
  class Error < StandardError; end

  CHROMIUM_ARGS = %w[--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking
                     --disable-component-update --disable-sync --no-first-run --window-size=1500,700].freeze

  # Whether chromium and chromedriver are installed (bin/test installs them).
  def self.available?
    %w[chromedriver chromium].all? { |cmd| ENV["PATH"].split(File::PATH_SEPARATOR).any? { |d| File.executable?(File.join(d, cmd)) } }
  end

  # Starts chromedriver and a browser session; yields the driver, then
  # quits both.
  def self.open(timeout: 60)
    driver = new(timeout: timeout)
    yield driver
  ensure
    driver&.quit
  end

  def initialize(timeout:)
    @timeout = timeout
    @profile = Dir.mktmpdir("chromium-profile")
    @port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    @log = File.join(@profile, "chromedriver.log")
    @pid = ChildProcess.spawn("chromedriver", "--port=#{@port}", "--log-path=#{@log}", %i[out err] => File::NULL)
    wait_for("chromedriver to be ready") { ready? }
    caps = { browserName: "chrome",
             "goog:chromeOptions": { binary: chromium, args: CHROMIUM_ARGS + ["--user-data-dir=#{@profile}/data"] } }
    @session = request(:post, "/session", capabilities: { alwaysMatch: caps })["sessionId"]
  end

  def visit(url)
    command(:post, "url", url: url)
  end

  # The element matching a CSS selector (its WebDriver id), waiting for it.
  def find(css)
    wait_for("an element #{css}") do
      command(:post, "element", using: "css selector", value: css).values.first
    rescue Error
      nil
    end
  end

  def click(css)
    command(:post, "element/#{find(css)}/click", {})
  end

  # The attribute of the element matching `css`, once the block accepts it
  # (elements are looked up again: the page may have been reloaded).
  def wait_for_attribute(css, name)
    wait_for("#{css} [#{name}] as expected") do
      value = command(:get, "element/#{find(css)}/attribute/#{name}")
      value if yield(value)
    rescue Error
      nil
    end
  end

  # The rendered text of the element matching `css`, once the block
  # accepts it (looked up again each time, as above).
  def wait_for_text(css)
    wait_for("#{css}'s text as expected") do
      value = command(:get, "element/#{find(css)}/text")
      value if yield(value)
    rescue Error
      nil
    end
  end

  # A PNG of the window, written to `path`.
  def screenshot(path)
    File.binwrite(path, command(:get, "screenshot").unpack1("m"))
    path
  end

  def quit
    request(:delete, "/session/#{@session}") if @session
  rescue StandardError
    nil
  ensure
    ChildProcess.stop(@pid) if @pid # TERM to chromedriver and its chromium, KILL if they linger
    FileUtils.rm_rf(@profile) if @profile
  end

  private

  def chromium
    %w[/usr/bin/chromium /usr/lib/chromium/chromium].find { |p| File.executable?(p) } || "chromium"
  end

  def ready?
    request(:get, "/status")["ready"]
  rescue SystemCallError, Error, EOFError
    false
  end

  def wait_for(what)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @timeout
    loop do
      value = yield
      return value if value
      raise Error, "gave up waiting #{@timeout} s for #{what}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.1 # polling the browser, not timing the code under test
    end
  end

  def command(verb, path, body = nil)
    request(verb, "/session/#{@session}/#{path}", body)
  end

  def request(verb, path, body = nil)
    http = Net::HTTP.new("127.0.0.1", @port)
    http.read_timeout = @timeout
    req = { get: Net::HTTP::Get, post: Net::HTTP::Post, delete: Net::HTTP::Delete }.fetch(verb).new(path)
    if body
      req["content-type"] = "application/json"
      req.body = JSON.generate(body)
    end
    response = http.request(req)
    value = JSON.parse(response.body)["value"]
    raise Error, "#{verb.upcase} #{path}: #{value.inspect[0, 300]}" unless response.is_a?(Net::HTTPSuccess)

    value
  end
end
