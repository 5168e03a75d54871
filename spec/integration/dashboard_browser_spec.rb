# frozen_string_literal: true

require "fileutils"
require "rack"
require "webrick"
require "circuit_breaker/dashboard"
require_relative "../../examples/support/webrick_rack"

# The status page in a real browser: examples/status_page.ru served by
# WEBrick on 127.0.0.1, Debian's headless chromium driven through
# chromedriver. Load the page, press an action, see the state change.
# A screenshot is kept in tmp/ (its path is printed).
RSpec.describe CircuitBreaker::Dashboard, "in a real browser", :integration do
  root = File.expand_path("../..", __dir__)

  before(:all) do
    skip "chromium or chromedriver is missing (bin/test installs them)" unless WebDriver.available?
  end

  before { CircuitBreaker.forget_all! }

  after do
    ENV.delete("BREAKERS_PASSWORD")
    @server&.shutdown
    @server_thread&.join(30)
    CircuitBreaker.forget_all!
  end

  def serve(app)
    @server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, Logger: WEBrick::Log.new(File::NULL),
                                      AccessLog: [])
    @server.mount("/", CircuitBreaker::Examples.webrick_handler, app)
    @server_thread = Thread.new { @server.start }
    "http://127.0.0.1:#{@server.config[:Port]}"
  end

  it "shows the state, trips the breaker with a press of its button, and resets it" do
    app, = Rack::Builder.parse_file(File.join(root, "examples/status_page.ru"))
    url = serve(app)
    # The example's HTTP Basic authentication, answered as a user would.
    ENV["BREAKERS_PASSWORD"] = "pw-#{Process.pid}"
    payments = CircuitBreaker.for("payments")
    row = "#breaker-payments"
    shot = File.join(root, "tmp", "dashboard-browser.png")
    FileUtils.mkdir_p(File.dirname(shot))

    WebDriver.open do |browser|
      browser.visit("#{url.sub('//', "//ops:pw-#{Process.pid}@")}/circuit_breakers/")
      expect(browser.wait_for_attribute(row, "data-state") { |s| s == "closed" }).to eq("closed")

      browser.click(%(#{row} form[action*="/trip?"] button))
      expect(browser.wait_for_attribute(row, "data-state") { |s| s == "open" }).to eq("open")
      expect(payments.state).to eq(:open)
      browser.screenshot(shot)

      browser.click(%(#{row} form[action*="/reset?"] button))
      expect(browser.wait_for_attribute(row, "data-state") { |s| s == "closed" }).to eq("closed")
      expect(payments.state).to eq(:closed)
    end
    expect(File.binread(shot, 8)).to eq("\x89PNG\r\n\x1A\n".b)
    RSpec.configuration.reporter.message("status page screenshot (tripped): #{shot.delete_prefix("#{root}/")}")
  end

  it "shows a capped breaker's calls in flight against its cap, and no cap for the others" do
    app, = Rack::Builder.parse_file(File.join(root, "examples/status_page.ru"))
    url = serve(app)
    ENV["BREAKERS_PASSWORD"] = "pw-#{Process.pid}"
    search = CircuitBreaker.for("search", max_concurrent: 4)
    inside = Queue.new
    release = Queue.new
    holder = Thread.new { search.call { inside << true; release.pop } }

    WebDriver.open do |browser|
      wait_until(what: "the call inside the breaker") { inside.size == 1 }
      browser.visit("#{url.sub('//', "//ops:pw-#{Process.pid}@")}/circuit_breakers/")
      # The page reloads itself (refresh: 5): it shows the held call.
      expect(browser.wait_for_attribute("#breaker-search .cap", "data-in-flight") { |n| n == "1" }).to eq("1")
      expect(browser.wait_for_text("#breaker-search .cap") { |t| t == "1 / 4 in flight" }).to eq("1 / 4 in flight")
      expect(browser.wait_for_text("#breaker-search .limited") { |t| t == "0 limited" }).to eq("0 limited")
      expect(browser.wait_for_text("#breaker-payments .cap") { |t| t == "no cap" }).to eq("no cap")
    end
  ensure
    release&.push(true)
    holder&.join(30)
  end
end
