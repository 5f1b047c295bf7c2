"""Stochastic-gradient MCMC: SGLD, SGHMC, SGNHT and ATMC kernels, gradients, schedules, step
sizes."""
