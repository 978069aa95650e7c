# Installs the service files. Run by `cmake --install` and by CPack's staging install (through
# install(SCRIPT) in systemd/CMakeLists.txt) because where they go depends on the install prefix,
# which is final only now (`cmake --install --prefix DIR`, CPack's /usr):
#   <prefix>/lib/systemd/system/llmq.service, ExecStart naming <prefix>/bin/llmq
#     (for prefix /usr: /lib/systemd/system, Debian 12's place for units)
#   <prefix>/lib/sysusers.d/llmq.conf and <prefix>/lib/tmpfiles.d/llmq.conf
#   /etc/llmq/llmq.yaml from config/llmq.example.yaml: an absolute path whatever the prefix, as
#     llmq reads it by default; an edited copy already there is kept.
# systemd looks for units and snippets under /usr/local/lib, /usr/lib and /lib, so prefix
# /usr/local (the default) and /usr both work. Every path is under $DESTDIR when it is set
# (file(INSTALL) adds it to absolute destinations itself).
# Set by systemd/CMakeLists.txt: LLMQ_SYSTEMD_SOURCE_DIR, LLMQ_CONFIG_EXAMPLE, LLMQ_STAGE_DIR.

set(_prefix "${CMAKE_INSTALL_PREFIX}")
if(_prefix STREQUAL "/usr")
  set(_unit_dir "/lib/systemd/system")
else()
  set(_unit_dir "${_prefix}/lib/systemd/system")
endif()

file(READ "${LLMQ_SYSTEMD_SOURCE_DIR}/llmq.service" _unit)
string(REPLACE "ExecStart=/usr/bin/llmq " "ExecStart=${_prefix}/bin/llmq " _unit "${_unit}")
file(WRITE "${LLMQ_STAGE_DIR}/llmq.service" "${_unit}")
set(_read644 PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL "${LLMQ_STAGE_DIR}/llmq.service" DESTINATION "${_unit_dir}" ${_read644})
file(INSTALL "${LLMQ_SYSTEMD_SOURCE_DIR}/llmq.sysusers.conf"
     DESTINATION "${_prefix}/lib/sysusers.d" RENAME llmq.conf ${_read644})
file(INSTALL "${LLMQ_SYSTEMD_SOURCE_DIR}/llmq.tmpfiles.conf"
     DESTINATION "${_prefix}/lib/tmpfiles.d" RENAME llmq.conf ${_read644})

set(_config "$ENV{DESTDIR}/etc/llmq/llmq.yaml")
if(EXISTS "${_config}")
  file(SHA256 "${_config}" _have)
  file(SHA256 "${LLMQ_CONFIG_EXAMPLE}" _new)
endif()
if(EXISTS "${_config}" AND NOT _have STREQUAL _new)
  message(STATUS "Keeping: ${_config} (edited; the example is ${LLMQ_CONFIG_EXAMPLE})")
else()
  file(INSTALL "${LLMQ_CONFIG_EXAMPLE}" DESTINATION "/etc/llmq" RENAME llmq.yaml
       ${_read644})
endif()
