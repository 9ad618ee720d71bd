/*
 * mca_hook_rdmx: an Open MPI hook component that does nothing but get loaded. It links
 * libuct_rdmx.so (DT_NEEDED), so that Open MPI's loading it loads the UCT module, whose ELF
 * constructor registers UCT component rdmx. Open MPI 4.1 opens the hook framework at the top of
 * MPI_Init, before pml ucx creates its UCP context, which then finds rdmx among UCX's own
 * components: UCX 1.13 never opens a module it was not built with (../README.md, "Loading").
 *
 * Every callback is NULL (the hook base calls only those that are set), and so are open and
 * close: there is nothing to set up, and the module stays mapped after Open MPI closes the
 * component (libuct_rdmx.so is linked -z nodelete, UCX keeps calling it).
 */
#include "ompi/mca/hook/hook.h"

/* The one exported symbol: Open MPI looks up mca_<framework>_<name>_component. The version is
 * rdmx's (RDMX_COMPONENT_VERSION_*, cmake/RdmxOpenMPI.cmake). */
__attribute__((visibility("default")))
const ompi_hook_base_component_1_0_0_t mca_hook_rdmx_component = {
    .hookm_version =
        {
            OMPI_HOOK_BASE_VERSION_1_0_0,
            .mca_component_name = "rdmx",
            MCA_BASE_MAKE_VERSION(component, RDMX_COMPONENT_VERSION_MAJOR,
                                  RDMX_COMPONENT_VERSION_MINOR, RDMX_COMPONENT_VERSION_PATCH),
        },
    .hookm_data = {MCA_BASE_METADATA_PARAM_NONE},
};
