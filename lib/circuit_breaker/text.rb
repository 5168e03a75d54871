# frozen_string_literal: true

class CircuitBreaker
  # Breaker names as the status page, its JSON and the Prometheus exposition
  # write them: UTF-8 always. A breaker may be named in any encoding, or
  # with bytes that are not valid in theirs (names are compared as given,
  # lib/circuit_breaker/registry.rb); one such name must not take the page
  # or the whole scrape down with an encoding error.
  #
  # @api private
  module Text
    module_function

    # @param value [String, Symbol]
    # @return [String] valid UTF-8: `value` converted when its encoding can
    #   be, its bytes read as UTF-8 otherwise, each invalid byte as U+FFFD
    def utf8(value)
      s = value.to_s
      return s if s.encoding == Encoding::UTF_8 && s.valid_encoding?

      bytes(s).force_encoding(Encoding::UTF_8).scrub("\uFFFD")
    end

    # @param value [String, Symbol]
    # @return [String] the bytes that stand for the name in a URL: those of
    #   its UTF-8 conversion where it has one, else its own (binary, unfrozen)
    def bytes(value)
      s = value.to_s
      if s.valid_encoding? && ![Encoding::UTF_8, Encoding::BINARY].include?(s.encoding)
        begin
          return s.encode(Encoding::UTF_8).b
        rescue EncodingError
          nil # no UTF-8 for some character: its own bytes, below
        end
      end
      s.b
    end
  end
  private_constant :Text
end
