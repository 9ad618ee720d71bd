# Run by `cmake --install` after mca_mtl_rdmx.so went to <prefix>/RDMX_OMPI_PLUGIN_DIR (set by
# plugin/ompi/CMakeLists.txt with Open MPI's prefix and component folder, from ompi_info at
# configure time). Installing for Open MPI's own prefix copies it into the component folder, where
# Open MPI finds it with no setting; any other prefix leaves it where it is and says how to point
# Open MPI at it. DESTDIR applies to both.
get_filename_component(_prefix "${CMAKE_INSTALL_PREFIX}" ABSOLUTE)
set(_plugin "${_prefix}/${RDMX_OMPI_PLUGIN_DIR}/mca_mtl_rdmx.so")
if(RDMX_OMPI_PREFIX AND RDMX_OMPI_COMPONENTS AND _prefix STREQUAL RDMX_OMPI_PREFIX)
  file(INSTALL "$ENV{DESTDIR}${_plugin}" DESTINATION "${RDMX_OMPI_COMPONENTS}")
  if(RDMX_LIBDIR)  # a shared librdmx: this copy finds it by absolute path, not $ORIGIN
    file(RPATH_SET FILE "$ENV{DESTDIR}${RDMX_OMPI_COMPONENTS}/mca_mtl_rdmx.so"
         NEW_RPATH "${_prefix}/${RDMX_LIBDIR}")
  endif()
  message(STATUS "mca_mtl_rdmx.so is in Open MPI's component folder ${RDMX_OMPI_COMPONENTS}: "
                 "mpirun --mca pml cm --mca mtl rdmx and ompi_info find it with no setting")
elseif(RDMX_OMPI_COMPONENTS)
  message(STATUS "mca_mtl_rdmx.so is in ${_prefix}/${RDMX_OMPI_PLUGIN_DIR}, outside Open MPI's "
                 "component folder (installing with --prefix ${RDMX_OMPI_PREFIX} puts it there): "
                 "point Open MPI at it with --mca mca_base_component_path "
                 "${RDMX_OMPI_COMPONENTS}:${_prefix}/${RDMX_OMPI_PLUGIN_DIR} (or the environment "
                 "variable OMPI_MCA_mca_base_component_path)")
else()
  message(STATUS "mca_mtl_rdmx.so is in ${_prefix}/${RDMX_OMPI_PLUGIN_DIR} (ompi_info was not "
                 "found at configure time: name the folder in mca_base_component_path)")
endif()
