"""The device side of :mod:`hybridsd.pdl` (imported by the kernel modules; importing hybridsd never needs Triton)."""

import triton
import triton.language as tl


@triton.jit
def pdl_wait(x, PDL: tl.constexpr):
    # PDL 1: wait until the kernel before has finished and its writes are visible; PDL 2: then also let the kernel
    # after launch. Returns x (int32): every load of what the kernel before may write, and every store, must depend on
    # the result. The op is pure (torch.compile's analysis of a user kernel then knows it writes no input; Triton's
    # gdc_wait is not, and the compiled step copied every argument, weights included), so only data order holds it.
    # One line of PTX: inductor copies the kernel source into a string.
    if PDL == 1:
        x = tl.inline_asm_elementwise("griddepcontrol.wait; mov.u32 $0, $1;", "=r,r", [x], dtype=tl.int32,
                                      is_pure=True, pack=1)
    elif PDL == 2:
        x = tl.inline_asm_elementwise("griddepcontrol.wait; griddepcontrol.launch_dependents; mov.u32 $0, $1;",
                                      "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    return x
