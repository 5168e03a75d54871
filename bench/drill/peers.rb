# frozen_string_literal: true

require "fileutils"
require "rbconfig"
require "rubygems"

module Drill
  # Where the drill finds the peers' code (docs/development.md, "rake
  # drill"): with DRILL_SOURCES=DIR, in DIR/owner+name/repo, either a
  # checked-out source tree (used as it is) or a bare git repository (its
  # newest release whose gemspec admits this Ruby, extracted into a temp
  # dir); without it, from the installed gem. Nothing of theirs is in this
  # repository. A peer found nowhere is skipped, and the drill says why.
  module Peers
    # Setup => [gem name, owner+name of its repository].
    GEMS = { "stoplight" => %w[stoplight bolshakov+stoplight], "semian" => %w[semian Shopify+semian],
             "semian-bulkhead" => %w[semian Shopify+semian],
             "circuitbox" => %w[circuitbox yammer+circuitbox] }.freeze

    module_function

    # The app's environment for the peer `setup` (merged into the drill's),
    # or a String saying why the peer is skipped. `tmp` holds what is
    # extracted or built, `log` is where it says what it used.
    def env(setup, tmp, log)
      name, repo = GEMS.fetch(setup)
      sources = ENV["DRILL_SOURCES"].to_s
      found = sources.empty? ? installed(name) : from_sources(name, File.join(sources, repo, "repo"), tmp)
      return found if found.is_a?(String)

      env, root = found
      paths = [env["RUBYLIB"], shim(name, tmp)]
      if setup == "semian-bulkhead" && root
        ext = semian_extension(root, tmp)
        return ext unless File.directory?(ext)

        paths << ext
      elsif setup == "semian"
        # Semian's circuit breaker without its SysV-semaphore C extension
        # (the bulkhead, off in this setup).
        env["SEMIAN_SEMAPHORES_DISABLED"] = "1"
      end
      log.call("#{setup}: #{found_where(env, root)}")
      env.merge("RUBYLIB" => paths.compact.join(File::PATH_SEPARATOR))
    end

    def found_where(env, root)
      env["DRILL_GEM"] ? "installed gem #{env['DRILL_GEM'].sub('=', ' ')}" : "#{root} (DRILL_SOURCES)"
    end

    # [env, nil] for the installed gem `name`, or why there is none.
    def installed(name)
      spec = Gem::Specification.find_by_name(name)
      [{ "DRILL_GEM" => "#{name}=#{spec.version}" }, nil]
    rescue Gem::MissingSpecError
      "#{name} is not installed as a gem (gem install #{name}), and DRILL_SOURCES is not given"
    end

    # [env, source root] for the peer in `repo`, a source tree or a bare
    # git repository, or why it cannot be used.
    def from_sources(name, repo, tmp)
      if File.directory?(File.join(repo, "lib"))
        requirement = ruby_requirement(File.read(File.join(repo, "#{name}.gemspec")))
        return "#{repo} needs Ruby #{requirement}" unless admits?(requirement)

        [{ "RUBYLIB" => File.join(repo, "lib") }, repo]
      elsif File.file?(File.join(repo, "HEAD"))
        tag = newest_release(repo, name)
        return "no release of #{name} in #{repo} supports Ruby #{RUBY_VERSION}" unless tag

        root = File.join(tmp, "#{name}-#{tag}")
        unless File.directory?(root)
          FileUtils.mkdir_p(root)
          system("git --git-dir=#{repo} archive #{tag} | tar -x -C #{root}", exception: true)
        end
        [{ "RUBYLIB" => File.join(root, "lib") }, root]
      else
        "no source tree or git repository at #{repo} (DRILL_SOURCES)"
      end
    end

    def ruby_requirement(gemspec)
      gemspec[/required_ruby_version\s*=\s*["']([^"']+)["']/, 1]
    end

    def admits?(requirement)
      requirement.nil? || Gem::Requirement.new(requirement).satisfied_by?(Gem::Version.new(RUBY_VERSION))
    end

    def newest_release(git, name)
      tags = `git --git-dir=#{git} tag`.split.select { |t| t.match?(/\Av\d+(\.\d+)*\z/) }
      tags.sort_by { |t| Gem::Version.new(t.delete_prefix("v")) }.reverse.find do |tag|
        spec = `git --git-dir=#{git} show #{tag}:#{name}.gemspec 2>/dev/null`
        !spec.empty? && ruby_requirement(spec) && admits?(ruby_requirement(spec))
      end
    end

    # Semian's C extension (its bulkhead's SysV semaphores), compiled from
    # `root`'s ext/semian with this Ruby's mkmf into a temp dir: the
    # directory to put on RUBYLIB (it holds semian/semian.so), or why it
    # could not be built. An installed gem built its own at install.
    def semian_extension(root, tmp)
      lib = File.join(tmp, "semian-ext")
      so = File.join(lib, "semian", "semian.#{RbConfig::CONFIG['DLEXT']}")
      return lib if File.exist?(so)

      extconf = File.join(root, "ext", "semian", "extconf.rb")
      return "no ext/semian/extconf.rb in #{root}" unless File.exist?(extconf)

      build = File.join(tmp, "semian-ext-build")
      FileUtils.mkdir_p(build)
      out = File.join(build, "build.log")
      built = system(RbConfig.ruby, extconf, chdir: build, out: out, err: %i[child out]) &&
              system("make", "-j2", chdir: build, out: [out, "a"], err: %i[child out])
      unless built && File.exist?(File.join(build, File.basename(so)))
        tail = File.exist?(out) ? File.readlines(out).last(5).join.strip : "no log"
        return "Semian's C extension did not build from #{root}/ext/semian (needs ruby-dev and libssl-dev): #{tail}"
      end

      FileUtils.mkdir_p(File.dirname(so))
      FileUtils.cp(File.join(build, File.basename(so)), so)
      lib
    end

    # Stoplight 4 requires redlock (not packaged by Debian) when it loads
    # its Redis store, which the drill does not use (its default store is
    # in memory): a directory holding a stand-in that refuses to be used,
    # when redlock is missing.
    def shim(name, tmp)
      return unless name == "stoplight" && !system(RbConfig.ruby, "-e", "require 'redlock'", err: File::NULL)

      dir = File.join(tmp, "shims")
      FileUtils.mkdir_p(dir)
      File.write(File.join(dir, "redlock.rb"), <<~RUBY)
        # The drill's stand-in: Stoplight's Redis store is not used.
        module Redlock
          class Client
            def initialize(*)
              raise NotImplementedError, "redlock is not installed (the drill uses Stoplight's memory store)"
            end
          end
        end
      RUBY
      dir
    end
  end
end
