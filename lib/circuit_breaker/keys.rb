# frozen_string_literal: true

class CircuitBreaker
  # The keys a breaker is found by outside this process: a `shared:` name
  # and a `namespace:` (the shared file's key, a fleet's Redis keys), as
  # the UTF-8 Strings they are compared as.
  #
  # @api private
  module Keys
    module_function

    # A `shared:` name or `namespace:` as the UTF-8 String the file's key is
    # made of: names are compared as UTF-8, so `"café"` in ISO-8859-1 and in
    # UTF-8 (or as a Symbol) name one breaker. A binary String is taken as
    # its bytes.
    #
    # @param option [Symbol] the option's name, for errors
    # @param value [String, Symbol]
    # @param empty [Boolean] whether "" is allowed
    # @return [String] frozen
    # @raise [TypeError, ArgumentError] naming `option`
    def key(option, value, empty: false)
      key = case value
            when Symbol then value.name
            when String then value
            else raise TypeError, "#{option} must be nil, a String or a Symbol (got #{value.class})"
            end
      raise ArgumentError, "#{option} must be a non-empty String or Symbol (got \"\")" if key.empty? && !empty

      key = key.encode(Encoding::UTF_8) unless [Encoding::UTF_8, Encoding::BINARY].include?(key.encoding)
      key.dup.force_encoding(Encoding::UTF_8).freeze
    rescue EncodingError => e
      raise ArgumentError, "#{option} must be convertible to UTF-8 (#{e.message})"
    end
  end
end
