# frozen_string_literal: true

require "json"
require "tmpdir"
require_relative "../../examples/support/flaky_upstream"

# A real Rails app (spec/fixtures/rails_app, Debian's ruby-railties: 6.1 or 7.2)
# booted in a child process with each autoloader, eager loading on and off:
# its own app/models/sliding_window.rb, a class body that registers a
# breaker and is reloaded, and the docs' initializer with its Faraday
# connection against a real server on 127.0.0.1.
RSpec.describe "a Rails app", :integration do
  root = File.expand_path("../..", __dir__)
  app = File.join(root, "spec/fixtures/rails_app")

  before(:all) do
    # Rails's HTML sanitizer loads nokogiri (spec/support/debian_packages.rb).
    DebianPackages.skip_unless_usable(self, "ruby-nokogiri")
    # Healthy throughout (scale): /api/orders answers 200; /status/CODE answers CODE.
    @upstream = CircuitBreaker::Examples::FlakyUpstream.start(scale: 1000, stop_after: 600)
  end

  after(:all) { @upstream&.stop }

  def boot(app, root, **env)
    Dir.mktmpdir do |dir|
      env = env.transform_keys(&:to_s).merge("LOG_PATH" => File.join(dir, "rails.log"),
                                             "ORDERS_URL" => @upstream.url,
                                             # Each boot's host-wide breakers its own (docs/shared.md)
                                             "CIRCUIT_BREAKER_SHM_DIR" => dir,
                                             "RUBYOPT" => "-I#{File.join(root, 'lib')}")
      out, err, status = ChildProcess.capture3(env, RbConfig.ruby, File.join(app, "script/check.rb"), chdir: app)
      raise "the app failed (#{status}):\n#{err}\n#{out}" unless status.success?

      [JSON.parse(out.lines.last), File.read(File.join(dir, "rails.log"))]
    end
  end

  # Rails 7 removed the classic autoloader: it runs where Rails has it (6.1
  # on Debian 12; Debian 13's Rails 7.2 has Zeitwerk only).
  autoloaders = Gem::Specification.find_by_name("railties").version < Gem::Version.new("7") ? %w[zeitwerk classic] : %w[zeitwerk]
  autoloaders.product(%w[0 1]).each do |autoloader, eager|
    context "with the #{autoloader} autoloader, eager loading #{eager == '1' ? 'on' : 'off'}" do
      before(:all) { @seen, @log = boot(app, root, AUTOLOADER: autoloader, EAGER_LOAD: eager) }

      let(:seen) { @seen }

      it "boots as configured, with the Railtie" do
        expect(seen).to include("autoloader" => autoloader, "eager_load" => eager == "1", "railtie" => true)
      end

      it "keeps the app's own SlidingWindow model (no superclass mismatch, not the gem's), before and after a reload" do
        expect(seen).to include("sliding_window_superclass" => "ApplicationModel",
                                "sliding_window_is_the_apps" => true,
                                "sliding_window_after_reload" => true)
        expect(seen).to include("circuit_open_error_defined" => false) # only with circuit_breaker/articles
      end

      it "serves docs/rails.md's controller (the orders, then 503 with Retry-After once open) and mounts the status page for admins only" do
        expect(seen).to include("orders_page" => 200, "orders_page_when_open" => [503, "15"], "status_page_for_anyone" => 404)
      end

      it "registers README.md's breaker, whose open_duration is a Duration" do
        expect(seen["inventory_open_duration"]).to be_within(1).of(30) # the real clock runs between trip! and retry_after
      end

      it "patches nothing of Ruby's core modules, and an app's NameError comes from the app's own line" do
        expect(seen).to include("gem_in_core" => [], "name_error" => ["OrdersSdk", "app/services/orders_report.rb"])
      end

      it "finds the same breaker when a reloaded class body calls CircuitBreaker.for with a new window and Proc" do
        expect(seen).to include("reloaded" => true, "same_breaker_after_reload" => true)
      end

      # 503s in a row: the default consecutive_failures (8, docs/choices.md)
      # opens it before the window's min_calls (20).
      it "trips the initializer's breaker through its Faraday connection: 8 failures, then rejections" do
        expect(seen).to include("orders_statuses" => { "503" => 8, "rejected" => 17 }, "orders_state" => "open")
        expect(seen["orders_open_duration"]).to be_within(1).of(15) # configure's default
      end

      it "caps the initializer's breaker at half the host's threads (2 workers × 4 threads unless the environment says)" do
        expect(seen).to include("orders_cap" => 4)
      end

      it "logs the opening to Rails.logger (the Railtie) and instruments it (the initializer's subscriber)" do
        expect(@log).to include('circuit "orders": closed -> open (consecutive_failures')
        expect(@log).to include("[alert] circuit orders opened")
      end
    end
  end

  it "turns every breaker into a pass-through with CIRCUIT_BREAKER_DISABLED=1, visible in metrics" do
    seen, log = boot(app, root, CIRCUIT_BREAKER_DISABLED: "1")

    expect(seen).to include("orders_statuses" => { "503" => 25 }, "orders_state" => "disabled",
                            "orders_metrics" => { "kill_switch" => true, "total" => 0, "rejected" => 0 })
    expect(log).not_to include("closed -> open")
  end

  it "shows the initializer of docs/rails.md verbatim" do
    initializer = File.read(File.join(app, "config/initializers/circuit_breaker.rb"))

    expect(File.read(File.join(root, "docs/rails.md"))).to include(initializer)
  end

  it "is not loaded, nor is the Railtie, without Rails" do
    out, status = ChildProcess.capture2e(RbConfig.ruby, "-I", File.join(root, "lib"), "-e",
                                         'require "circuit_breaker"; p [defined?(Rails), defined?(CircuitBreaker::Railtie)]')

    expect(status).to be_success, out
    expect(out.strip).to eq("[nil, nil]")
  end
end
