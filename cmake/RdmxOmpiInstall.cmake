# Run by `cmake --install` after an Open MPI component (RDMX_OMPI_PLUGIN: mca_mtl_rdmx.so,
# mca_hook_rdmx.so) went to <prefix>/RDMX_OMPI_PLUGIN_DIR (set by rdmx_install_ompi_component,
# cmake/RdmxOpenMPI.cmake, with Open MPI's prefix and component folder from ompi_info at
# configure time). Installing for Open MPI's own prefix copies it into the component folder, where
# Open MPI finds it with no setting; any other prefix leaves it where it is and says how to point
# Open MPI at it. DESTDIR applies to both.
get_filename_component(_prefix "${CMAKE_INSTALL_PREFIX}" ABSOLUTE)
set(_plugin "${_prefix}/${RDMX_OMPI_PLUGIN_DIR}/${RDMX_OMPI_PLUGIN}")
if(RDMX_OMPI_PREFIX AND RDMX_OMPI_COMPONENTS AND _prefix STREQUAL RDMX_OMPI_PREFIX)
  file(INSTALL "$ENV{DESTDIR}${_plugin}" DESTINATION "${RDMX_OMPI_COMPONENTS}")
  if(RDMX_OMPI_PLUGIN_RPATH)  # the library it loads: this copy finds it by absolute path
    file(RPATH_SET FILE "$ENV{DESTDIR}${RDMX_OMPI_COMPONENTS}/${RDMX_OMPI_PLUGIN}"
         NEW_RPATH "${_prefix}/${RDMX_OMPI_PLUGIN_RPATH}")
  endif()
  message(STATUS "${RDMX_OMPI_PLUGIN} is in Open MPI's component folder ${RDMX_OMPI_COMPONENTS}: "
                 "mpirun and ompi_info find it with no setting")
elseif(RDMX_OMPI_COMPONENTS)
  message(STATUS "${RDMX_OMPI_PLUGIN} is in ${_prefix}/${RDMX_OMPI_PLUGIN_DIR}, outside Open MPI's "
                 "component folder (installing with --prefix ${RDMX_OMPI_PREFIX} puts it there): "
                 "point Open MPI at it with --mca mca_base_component_path "
                 "${RDMX_OMPI_COMPONENTS}:${_prefix}/${RDMX_OMPI_PLUGIN_DIR} (or the environment "
                 "variable OMPI_MCA_mca_base_component_path)")
else()
  message(STATUS "${RDMX_OMPI_PLUGIN} is in ${_prefix}/${RDMX_OMPI_PLUGIN_DIR} (ompi_info was not "
                 "found at configure time: name the folder in mca_base_component_path)")
endif()
