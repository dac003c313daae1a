#error "the CUDA emulation has no half types"
