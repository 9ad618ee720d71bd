# RDMX_FUZZ=ON: a build for the fuzz targets of tests/fuzz (ctest -L fuzz). Every C++ file here
# is instrumented, not only the targets: the fuzzer's coverage feedback and the sanitizers must
# reach the parsers in rdmx_protocol. Build the targets alone: cmake --build DIR -t rdmx_fuzz.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "RDMX_FUZZ needs clang (libFuzzer), e.g. CXX=clang++-14 CC=clang-14; "
                      "this is ${CMAKE_CXX_COMPILER_ID}")
endif()
# -fno-sanitize-recover: undefined behaviour aborts, so libFuzzer keeps the input as a crash.
add_compile_options(
  "$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined>"
  "$<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all;-fno-omit-frame-pointer>")
add_link_options(-fsanitize=address,undefined)
