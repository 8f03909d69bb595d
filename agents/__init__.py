"""Gymnasium environment over the simulator, training and evaluation with stable-baselines3, pretrained agents."""

import gymnasium as gym

gym.register(id="corral/Placement-v0", entry_point="agents.env:PlacementEnv")
gym.register(id="corral/DeepShare-v0", entry_point="agents.deepshare_env:DeepShareEnv")
