# frozen_string_literal: true

require "webrick"

class CircuitBreaker
  module Examples
    # The Rack handler that mounts a Rack app on a WEBrick server, for
    # bin/demo --serve and the browser spec: Rack 2 ships it as
    # Rack::Handler::WEBrick; Rack 3 moved every handler to the rackup gem
    # (Debian 13's ruby-rackup), as Rackup::Handler::WEBrick.
    def self.webrick_handler
      require "rackup/handler/webrick"
      Rackup::Handler::WEBrick
    rescue LoadError
      require "rack/handler/webrick"
      Rack::Handler::WEBrick
    end
  end
end
