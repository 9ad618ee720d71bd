# Open MPI as the host of rdmx's components, the MTL (plugin/ompi) and the hook that loads the UCT
# module (plugin/ucx/hook), and of the tests that run them. Included once by the top-level
# CMakeLists.txt, before both; it sets
#   RDMX_HAVE_OMPI            the devel headers and libraries are there (libopenmpi-dev)
#   RDMX_OMPI_INFO            ompi_info, if found
#   RDMX_OMPI_COMPONENT_DIR   Open MPI's own component folder (ompi_info --path pkglibdir), which a
#                             mca_base_component_path must keep or mpirun loses its components
# and defines
#   rdmx_ompi_component(<target>)   how a component DSO is built against Open MPI's headers
#   rdmx_install_ompi_component(<target> [RPATH <dir under the prefix>])
#                             cmake --install rules: <prefix>/RDMX_OMPI_PLUGIN_INSTALL_DIR, and
#                             Open MPI's component folder when installing for Open MPI's prefix

# Open MPI's include and library folders: pkg-config, else the wrapper compiler, else Debian's.
pkg_check_modules(RDMX_OMPI QUIET ompi)
set(_ompi_incdirs ${RDMX_OMPI_INCLUDE_DIRS})
set(_ompi_libdirs ${RDMX_OMPI_LIBRARY_DIRS})
if(NOT _ompi_incdirs)
  find_program(RDMX_MPICC NAMES mpicc)
  if(RDMX_MPICC)
    execute_process(COMMAND ${RDMX_MPICC} --showme:incdirs OUTPUT_VARIABLE _inc
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    execute_process(COMMAND ${RDMX_MPICC} --showme:libdirs OUTPUT_VARIABLE _lib
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    separate_arguments(_ompi_incdirs UNIX_COMMAND "${_inc}")
    separate_arguments(_ompi_libdirs UNIX_COMMAND "${_lib}")
  endif()
endif()
set(_ompi_debian /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openmpi)
find_path(RDMX_OMPI_MTL_INCLUDE ompi/mca/mtl/mtl.h
          HINTS ${_ompi_incdirs} PATHS ${_ompi_debian}/include/openmpi NO_DEFAULT_PATH)
find_path(RDMX_OMPI_MPI_INCLUDE mpi.h
          HINTS ${_ompi_incdirs} PATHS ${_ompi_debian}/include NO_DEFAULT_PATH)
find_library(RDMX_OMPI_LIBMPI mpi HINTS ${_ompi_libdirs} PATHS ${_ompi_debian}/lib)
find_library(RDMX_OMPI_LIBOPAL open-pal HINTS ${_ompi_libdirs} PATHS ${_ompi_debian}/lib)
if(RDMX_OMPI_MTL_INCLUDE AND RDMX_OMPI_MPI_INCLUDE AND RDMX_OMPI_LIBMPI AND RDMX_OMPI_LIBOPAL)
  set(RDMX_HAVE_OMPI TRUE)
else()
  set(RDMX_HAVE_OMPI FALSE)
endif()

# Open MPI's prefix and component folder, for the install and the tests.
find_program(RDMX_OMPI_INFO NAMES ompi_info)
set(RDMX_OMPI_PREFIX "")
set(RDMX_OMPI_PKGLIBDIR "")
if(RDMX_OMPI_INFO)
  execute_process(COMMAND ${RDMX_OMPI_INFO} --parsable --path prefix --path pkglibdir
                  OUTPUT_VARIABLE _out ERROR_QUIET)
  if(_out MATCHES "path:prefix:([^\n]+)")
    set(RDMX_OMPI_PREFIX ${CMAKE_MATCH_1})
  endif()
  if(_out MATCHES "path:pkglibdir:([^\n]+)")
    set(RDMX_OMPI_PKGLIBDIR ${CMAKE_MATCH_1})
  endif()
endif()
if(RDMX_OMPI_PKGLIBDIR)
  set(_ompi_component_dir ${RDMX_OMPI_PKGLIBDIR})
else()
  set(_ompi_component_dir ${_ompi_debian}/lib/openmpi3)
endif()
set(RDMX_OMPI_COMPONENT_DIR ${_ompi_component_dir} CACHE PATH
    "Open MPI's component folder (ompi_info --path pkglibdir)")

set(RDMX_OMPI_PLUGIN_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/rdmx/openmpi CACHE STRING
    "Where cmake --install puts rdmx's Open MPI components (relative to the install prefix)")

function(rdmx_ompi_component target)
  rdmx_c_target_defaults(${target})
  # Open MPI's headers are not warning-clean under our flags: include them as system headers.
  target_include_directories(${target} SYSTEM PRIVATE
    ${RDMX_OMPI_MPI_INCLUDE} ${RDMX_OMPI_MTL_INCLUDE})
  # -mcx16: opal's atomics use a 16-byte compare-and-swap (OPAL_HAVE_SYNC_BUILTIN_CSWAP_INT128);
  # without it __sync_val_compare_and_swap_16 stays undefined, which --no-undefined catches.
  target_compile_options(${target} PRIVATE -mcx16)
  # The version ompi_info shows for the component: rdmx's.
  target_compile_definitions(${target} PRIVATE
    RDMX_COMPONENT_VERSION_MAJOR=${PROJECT_VERSION_MAJOR}
    RDMX_COMPONENT_VERSION_MINOR=${PROJECT_VERSION_MINOR}
    RDMX_COMPONENT_VERSION_PATCH=${PROJECT_VERSION_PATCH})
  target_link_libraries(${target} PRIVATE ${RDMX_OMPI_LIBMPI} ${RDMX_OMPI_LIBOPAL})
  # Only mca_<framework>_rdmx_component is exported; static libraries stay private to the DSO.
  target_link_options(${target} PRIVATE -Wl,--no-undefined -Wl,--exclude-libs,ALL)
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden)
endfunction()

# RPATH: a folder under the install prefix that the installed component loads a library from.
# Under <prefix>/RDMX_OMPI_PLUGIN_INSTALL_DIR it is named relative to $ORIGIN (the target's
# INSTALL_RPATH, set here); the copy in Open MPI's folder names it by absolute path.
function(rdmx_install_ompi_component target)
  cmake_parse_arguments(ARG "" "RPATH" "" ${ARGN})
  if(ARG_RPATH)
    file(RELATIVE_PATH _rel /p/${RDMX_OMPI_PLUGIN_INSTALL_DIR} /p/${ARG_RPATH})
    string(REGEX REPLACE "/$" "" _rel "${_rel}")  # "../../" for the parent's parent
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/${_rel}")
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION ${RDMX_OMPI_PLUGIN_INSTALL_DIR})
  install(CODE "set(RDMX_OMPI_PREFIX \"${RDMX_OMPI_PREFIX}\")
    set(RDMX_OMPI_COMPONENTS \"${RDMX_OMPI_PKGLIBDIR}\")
    set(RDMX_OMPI_PLUGIN_DIR \"${RDMX_OMPI_PLUGIN_INSTALL_DIR}\")
    set(RDMX_OMPI_PLUGIN \"$<TARGET_FILE_NAME:${target}>\")
    set(RDMX_OMPI_PLUGIN_RPATH \"${ARG_RPATH}\")")
  install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/RdmxOmpiInstall.cmake)
endfunction()
