#!/usr/bin/env ruby
# frozen_string_literal: true

# The README's first example, verbatim: a breaker in front of a service that
# fails every request (nothing listens on 127.0.0.1:9), opening after five
# failures and rejecting the rest without a request.
#
#   ruby examples/first_breaker.rb
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)

require "circuit_breaker/faraday"

orders = Faraday.new("http://127.0.0.1:9") do |f|
  f.request :circuit_breaker, breaker: CircuitBreaker.new(min_calls: 5, open_duration: 30)
end

8.times do |i|
  orders.get("/api/orders")
rescue Faraday::ConnectionFailed
  puts "#{i}: request failed"
rescue CircuitBreaker::OpenError => e
  puts "#{i}: rejected without a request (#{e.message})"
end
# 0: request failed
# ...
# 4: request failed
# 5: rejected without a request (circuit is open)
# ...
