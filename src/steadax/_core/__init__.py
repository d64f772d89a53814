"""steadax core: modules, transformations, the contract, the dtype policy and tree helpers."""
