# Per-target warnings and sanitizers; applied with rdmx_target_defaults(<target>).

# librdmx.so calls its own functions directly, not through the PLT: nobody interposes them, and
# in the emulated guest every indirect jump on the per-message path costs. The compile flag lets
# gcc inline and call directly within a file; the library is linked with -Bsymbolic-functions
# (RDMX_SYMBOLIC) for calls between files. (The MTL plugin exports one symbol: hidden already.)
set(RDMX_NO_INTERPOSITION -fno-semantic-interposition)
set(RDMX_SYMBOLIC -Wl,-Bsymbolic-functions)
function(rdmx_target_defaults target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
    -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough
    -fno-strict-aliasing ${RDMX_NO_INTERPOSITION})
  if(RDMX_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(RDMX_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# C targets (the Open MPI glue) cannot take the C++-only flags above.
function(rdmx_c_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wformat=2 -fno-strict-aliasing)
  if(RDMX_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(RDMX_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
