# `npm ci` in tests/browser/ when node_modules is missing or older than package-lock.json.
# Fails with what to install when node/npm are missing.
find_program(NPM npm)
find_program(NODE node)
if(NOT NPM OR NOT NODE)
  message(FATAL_ERROR "browser tests need node and npm: run scripts/install-deps.sh "
                      "(Debian packages nodejs npm)")
endif()
set(_stamp "${SRC}/node_modules/.package-lock.json")
if(EXISTS "${_stamp}" AND NOT "${SRC}/package-lock.json" IS_NEWER_THAN "${_stamp}")
  message(STATUS "node_modules up to date")
  return()
endif()
execute_process(COMMAND "${NPM}" ci --no-audit --no-fund WORKING_DIRECTORY "${SRC}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 AND LOCK_MAY_LACK_PLATFORMS)
  # A package with per-platform optional binaries (@duckdb/node-bindings-<os>-<cpu>): npm 11
  # writes only this platform's into the lock, and `npm ci` then refuses the lock as out of
  # sync. Install the versions package.json pins instead, leaving the lock file untouched.
  message(STATUS "npm ci refused the lock file; npm install --no-save --no-package-lock")
  execute_process(COMMAND "${NPM}" install --no-save --no-package-lock --no-audit --no-fund
                  WORKING_DIRECTORY "${SRC}" RESULT_VARIABLE rc)
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "npm ci in ${SRC} failed (${rc})")
endif()
