"""Training on stored trajectories: datasets, DPO-family losses, SFT, reward models, PRM, Q-RM."""
