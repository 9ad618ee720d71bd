# Per-target warnings and sanitizers; applied with rdmx_target_defaults(<target>).

# librdmx.so calls its own functions directly, not through the PLT: nobody interposes them, and
# in the emulated guest every indirect jump on the per-message path costs. The compile flag lets
# gcc inline and call directly within a file; the library is linked with -Bsymbolic-functions
# (RDMX_SYMBOLIC) for calls between files. (The MTL plugin exports one symbol: hidden already.)
set(RDMX_NO_INTERPOSITION -fno-semantic-interposition)
set(RDMX_SYMBOLIC -Wl,-Bsymbolic-functions)
# RDMX_SANITIZE (CMakeLists.txt) -> RDMX_SANITIZE_FLAGS, for compile and link of every target
# (library, plugin, tests): ON/address = ASan + UBSan, thread = TSan, OFF/false = none.
# RDMX_SANITIZE_KIND is "address", "thread" or "" for the tests that depend on it.
string(TOLOWER "${RDMX_SANITIZE}" _rdmx_san)
if(_rdmx_san STREQUAL "thread")
  set(RDMX_SANITIZE_KIND thread)
  set(RDMX_SANITIZE_FLAGS -fsanitize=thread)
elseif(_rdmx_san STREQUAL "address" OR _rdmx_san MATCHES "^(on|yes|true|y|1)$")
  set(RDMX_SANITIZE_KIND address)
  set(RDMX_SANITIZE_FLAGS -fsanitize=address,undefined)
elseif(NOT RDMX_SANITIZE)
  set(RDMX_SANITIZE_KIND "")
  set(RDMX_SANITIZE_FLAGS "")
else()
  message(FATAL_ERROR "RDMX_SANITIZE=${RDMX_SANITIZE}: use OFF, ON (or address) or thread")
endif()

function(rdmx_target_defaults target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
    -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough
    -fno-strict-aliasing ${RDMX_NO_INTERPOSITION})
  if(RDMX_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(RDMX_SANITIZE_FLAGS)
    target_compile_options(${target} PRIVATE ${RDMX_SANITIZE_FLAGS} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE ${RDMX_SANITIZE_FLAGS})
  endif()
endfunction()

# C targets (the Open MPI glue) cannot take the C++-only flags above. Under TSan, gcc warns
# (-Wtsan) that Open MPI's inline atomics (opal/sys/gcc_builtin/atomic.h) use
# atomic_thread_fence, which TSan does not model: Open MPI's code, not rdmx's, so not under
# RDMX_WERROR. The C++ targets keep the warning.
function(rdmx_c_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wformat=2 -fno-strict-aliasing)
  if(RDMX_SANITIZE_KIND STREQUAL "thread")
    target_compile_options(${target} PRIVATE $<$<C_COMPILER_ID:GNU>:-Wno-tsan>)
  endif()
  if(RDMX_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(RDMX_SANITIZE_FLAGS)
    target_compile_options(${target} PRIVATE ${RDMX_SANITIZE_FLAGS} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE ${RDMX_SANITIZE_FLAGS})
  endif()
endfunction()
