# frozen_string_literal: true

require "openssl"
require "securerandom"
require "rack/utils"

class CircuitBreaker
  class Dashboard
    # The dashboard's CSRF tokens: a signed double-submit cookie. The form's
    # hidden field or an `X-CSRF-Token` header must equal the
    # `SameSite=Strict` cookie set with the page, which must carry this
    # dashboard's signature; a cross-site `Origin` or `Sec-Fetch-Site` is
    # refused (docs/operating.md).
    # @api private
    class CSRF
      COOKIE = "circuit_breaker_csrf"

      # @param secret [String, nil] signs the tokens (nil: {default_secret})
      def initialize(secret)
        @secret = secret || self.class.default_secret
      end

      # Rails' secret_key_base, else SECRET_KEY_BASE, else this process's own
      # (tokens then hold only in the process that issued them).
      # @return [String]
      def self.default_secret
        rails = defined?(::Rails) && ::Rails.respond_to?(:application) && ::Rails.application
        from_rails = rails.respond_to?(:secret_key_base) ? rails.secret_key_base : nil
        [from_rails, ENV["SECRET_KEY_BASE"]].find { |s| s.is_a?(String) && s.bytesize >= 16 } || SecureRandom.bytes(32)
      end

      # The token: it must be one this dashboard issued (its signature), and
      # the form or header must repeat the cookie's. An equal pair that was
      # never issued (a cookie planted by a sibling subdomain) is refused.
      # @return [Boolean]
      def ok?(request, form)
        cookie = request.cookies[COOKIE].to_s
        given = (request.get_header("HTTP_X_CSRF_TOKEN") || form["csrf_token"]).to_s
        return false unless issued?(cookie) && Rack::Utils.secure_compare(cookie, given)
        return false if request.get_header("HTTP_SEC_FETCH_SITE").to_s == "cross-site"

        origin = request.get_header("HTTP_ORIGIN")
        origin.nil? || origin == request.base_url
      end

      # The request's token when this dashboard issued it, else a new one,
      # set as the cookie in `headers`.
      # @return [String]
      def token_for(request, headers)
        token = request.cookies[COOKIE].to_s
        token = issue unless issued?(token)
        Rack::Utils.set_cookie_header!(headers, COOKIE,
                                       value: token, path: request.script_name.empty? ? "/" : request.script_name,
                                       httponly: true, same_site: :strict, secure: request.ssl?)
        token
      end

      private

      # A token: 32 random bytes and their HMAC-SHA256 under the secret, in hex.
      def issue
        nonce = SecureRandom.hex(32)
        "#{nonce}#{OpenSSL::HMAC.hexdigest('SHA256', @secret, nonce)}"
      end

      def issued?(token)
        return false unless token.match?(/\A\h{128}\z/)

        Rack::Utils.secure_compare(OpenSSL::HMAC.hexdigest("SHA256", @secret, token[0, 64]), token[64, 64])
      end
    end
  end
end
